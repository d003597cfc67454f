import { parentPort, workerData } from 'node:worker_threads';
import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { giveDrizzleParsers } from './adapters/pglite-parsers.js';
import { PreparedQueries } from './adapters/pglite-prepared.js';
import type { EngineReply, EngineRequest } from './embedded-engine.js';

/**
 * The embedded PostgreSQL's own thread (started by embedded-engine.ts): it owns
 * the PGlite instance and runs each statement the main thread sends, in the order
 * sent. PGlite queues them itself (one session, FIFO); which statements belong to
 * a transaction is the main thread's affair (its lock keeps others out). The
 * statements sent repeatedly run prepared (PreparedQueries).
 */
const port = parentPort!;
const { dir } = workerData as { dir: string };

/** What crosses back of a failed statement: the error's own fields (code, constraint, detail...) and its message. */
function plainError(err: unknown): Record<string, unknown> {
  if (!(err instanceof Error)) return { message: String(err) };
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(err)) if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) fields[k] = v;
  return { ...fields, name: err.name, message: err.message };
}

async function main(): Promise<void> {
  await mkdir(dir, { recursive: true });
  const lite = await PGlite.create(dir);
  await lite.exec(`SET TimeZone = 'UTC'`);
  giveDrizzleParsers(lite);
  const queries = new PreparedQueries(lite);
  const answer = (id: number, run: Promise<unknown>) =>
    run.then(
      (value) => port.postMessage({ id, ok: true, value } satisfies EngineReply),
      (err: unknown) => port.postMessage({ id, ok: false, error: plainError(err) } satisfies EngineReply),
    );
  port.on('message', (m: EngineRequest) => {
    if (m.op === 'query') void answer(m.id, queries.query(m.text, m.params, m.options));
    else if (m.op === 'exec') void answer(m.id, lite.exec(m.text));
    else void answer(m.id, lite.close());
  });
  port.postMessage({ id: 0, ok: true, value: 'ready' } satisfies EngineReply);
}

main().catch((err: unknown) => port.postMessage({ id: 0, ok: false, error: plainError(err) } satisfies EngineReply));
