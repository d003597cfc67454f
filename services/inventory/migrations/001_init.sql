-- Inventory records: reagent catalog, stock items, stock movements, inventory runs.
-- Every table carries org_id; every query of the service filters by it. Stock
-- quantities are numeric (exact: a thousand consumptions of 0.1 leave no float
-- residue); physical properties of a reagent are double precision.

create table inventory.reagents (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  alias text,
  cas_number text,
  formula text,
  purity text,
  aggregate_state text,
  storage_temperature text,
  storage_class text,
  un_number text,
  description text,
  notes text,
  molecular_weight double precision,
  density double precision,
  flash_point double precision,
  signal_word text check (signal_word in ('danger', 'warning', 'none')),
  h_phrases text[] not null default '{}',
  p_phrases text[] not null default '{}',
  hazard_pictograms text[] not null default '{}',
  external_link text,
  department_id uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- target of the same-organisation reference of stock items
  constraint reagents_org_id_key unique (org_id, id)
);
create index reagents_org_created_idx on inventory.reagents (org_id, created_at, id);
create index reagents_org_name_idx on inventory.reagents (org_id, name);
create index reagents_org_cas_idx on inventory.reagents (org_id, cas_number);
create index reagents_org_department_idx on inventory.reagents (org_id, department_id);

create table inventory.stock_items (
  id uuid primary key,
  org_id uuid not null,
  catalog_id uuid not null,
  -- changed only by stock movements, in the movement's transaction
  quantity numeric not null check (quantity >= 0),
  unit text not null,
  name_suffix text,
  manufacturer text,
  supplier text,
  article_number text,
  order_number text,
  lot_number text,
  lot_status text,
  container_material text,
  cost_center text,
  project_number text,
  intended_use text,
  notes text,
  package_size_full numeric,
  package_size_current numeric,
  purchase_price numeric,
  min_stock numeric,
  storage_location_id uuid,
  department_id uuid,
  acquired_on date,
  opened_on date,
  expires_on date,
  inspected_on date,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint stock_items_org_id_key unique (org_id, id),
  -- a catalog entry with stock cannot be deleted (the service answers 409 reagent_in_use)
  constraint stock_items_catalog_fkey foreign key (org_id, catalog_id)
    references inventory.reagents (org_id, id) on delete restrict
);
create index stock_items_org_created_idx on inventory.stock_items (org_id, created_at, id);
create index stock_items_org_catalog_idx on inventory.stock_items (org_id, catalog_id);
create index stock_items_org_location_idx on inventory.stock_items (org_id, storage_location_id);
create index stock_items_org_department_idx on inventory.stock_items (org_id, department_id);
create index stock_items_org_expires_idx on inventory.stock_items (org_id, expires_on);

-- The log that explains every stock item's quantity. Rows are never updated;
-- deleting one reverses its delta (see stock-movements.ts).
create table inventory.stock_movements (
  id uuid primary key,
  org_id uuid not null,
  stock_item_id uuid not null,
  movement_type text not null check (movement_type in ('consume', 'restock', 'adjustment', 'transfer', 'dispose')),
  quantity_delta numeric not null check (quantity_delta <> 0),
  quantity_after numeric not null,
  unit text not null,
  reason text,
  intended_use text,
  -- an experiment entry of the notebook service; not verified across services
  entry_id uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- deleting a stock item (administrators only) takes its log with it
  constraint stock_movements_item_fkey foreign key (org_id, stock_item_id)
    references inventory.stock_items (org_id, id) on delete cascade
);
create index stock_movements_org_created_idx on inventory.stock_movements (org_id, created_at, id);
create index stock_movements_org_item_idx on inventory.stock_movements (org_id, stock_item_id, created_at);
create index stock_movements_org_entry_idx on inventory.stock_movements (org_id, entry_id);

create table inventory.inventories (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  notes text,
  scope_room_id uuid,
  scope_location_id uuid,
  status text not null default 'open' check (status in ('open', 'closed', 'archived')),
  closed_at timestamptz,
  closed_by uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index inventories_org_created_idx on inventory.inventories (org_id, created_at, id);
create index inventories_org_status_idx on inventory.inventories (org_id, status);
