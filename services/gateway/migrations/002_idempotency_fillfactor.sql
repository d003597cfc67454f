-- A claim row is inserted narrow and updated soon after with the stored answer,
-- several times wider. With full pages the new version lands on another page and
-- every index gets a new entry (only ~20% of the updates were HOT under load); pages
-- kept mostly free take the wider version in place (a HOT update: no index entry).
alter table gateway.idempotency set (fillfactor = 25);
