// The baseline of the read and write benchmarks: one express process doing what
// the full stack does at its core, directly: the same token lookup (hash, join
// membership) and the same SELECT / INSERT on the same tables, no gRPC, no outbox.
import { createHash, randomUUID } from 'node:crypto';
import express from 'express';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10, options: '-c TimeZone=UTC' });
const app = express();
app.use(express.json());

async function auth(req, res) {
  const token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
  const hash = createHash('sha256').update(token).digest('hex');
  const { rows } = await pool.query(
    `select t.id, t.org_id, t.user_id, m.role from identity.tokens t
       left join identity.memberships m on m.org_id = t.org_id and m.user_id = t.user_id
      where t.token_hash = $1 and t.revoked_at is null`,
    [hash],
  );
  if (!rows[0]) {
    res.status(401).json({ error: { code: 'unauthorized', message: 'no' } });
    return undefined;
  }
  return rows[0];
}

app.get('/v1/samples/:id', async (req, res) => {
  const who = await auth(req, res);
  if (!who) return;
  const { rows } = await pool.query(`select row_to_json(s)::text as j from notebook.samples s where id = $1 and org_id = $2`, [req.params.id, who.org_id]);
  if (!rows[0]) return res.status(404).json({ error: { code: 'not_found', message: 'not found' } });
  res.type('json').send(`{"data":${rows[0].j}}`);
});

app.get('/v1/samples', async (req, res) => {
  const who = await auth(req, res);
  if (!who) return;
  // the page and its total as the records engine selects them: the total a count of
  // its own, the page by the (org_id, created_at, id) index
  const { rows } = await pool.query(
    `select coalesce(json_agg(row_to_json(s) order by s.created_at desc, s.id desc)::text, '[]') as j,
            (select count(*) from notebook.samples c where c.org_id = $1) as total
       from (select * from notebook.samples s where org_id = $1 order by created_at desc, id desc limit 50) s`,
    [who.org_id],
  );
  res.type('json').send(`{"data":${rows[0].j},"pagination":{"limit":50,"offset":0,"total":${rows[0].total}}}`);
});

app.post('/v1/samples', async (req, res) => {
  const who = await auth(req, res);
  if (!who) return;
  const { rows } = await pool.query(
    `insert into notebook.samples (id, org_id, name, type, created_by) values ($1, $2, $3, $4, $5) returning row_to_json(samples)::text as j`,
    [randomUUID(), who.org_id, req.body.name, req.body.type ?? null, who.user_id],
  );
  res.status(201).type('json').send(`{"data":${rows[0].j}}`);
});

const server = app.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('baseline ready'));
process.on('SIGTERM', () => server.close(() => pool.end().then(() => process.exit(0))));
