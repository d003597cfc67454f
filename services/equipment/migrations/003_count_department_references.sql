-- Records written before identity counted the departments they name (decision
-- 056): one department_ref.changed per organisation, department and resource,
-- with the number of such records (n), for identity to count once. Written by
-- the migration, so exactly once; the relay takes it like any other event.
insert into equipment.outbox (id, type, message)
select e.id, 'department_ref.changed',
       jsonb_build_object('id', e.id, 'type', 'department_ref.changed', 'org_id', e.org_id, 'occurred_at', now(),
         'data', jsonb_build_object('resource', e.resource, 'from', null, 'to', e.department_id, 'hold_id', null, 'n', e.n))
  from (
    select gen_random_uuid() as id, c.* from (
    select org_id, department_id, 'equipment' as resource, count(*)::int as n from equipment.equipment where department_id is not null group by org_id, department_id
    ) c
  ) e;
