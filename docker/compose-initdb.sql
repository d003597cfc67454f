-- One database per component, as in the cluster (each reads its own DATABASE_URL).
create database lab_gateway;
create database lab_identity;
create database lab_notebook;
create database lab_audit;
create database lab_inventory;
create database lab_equipment;
create database lab_webhooks;
create database lab_telemetry;
create database lab_orders;
create database lab_notifications;
create database lab_jobs;
