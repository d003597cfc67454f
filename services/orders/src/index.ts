import path from 'node:path';
import { z } from 'zod';
import { grpcTarget, loadConfig, type ServiceDefinition } from '@lab/kit';
import { NotebookSamples } from './notebook-client.js';
import { DEFAULT_CAPS } from './results.js';
import { registerHandlers } from './server.js';

export { DEFAULT_CAPS, rowsWarning, samplesWarning, type ResultCaps } from './results.js';

const ordersEnv = z.object({
  /** most result rows one GET /v1/lab-results answers */
  ORDERS_RESULTS_MAX_ROWS: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_CAPS.rows),
  /** most samples an order filter of GET /v1/lab-results resolves to */
  ORDERS_RESULTS_MAX_SAMPLES: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_CAPS.samples),
  /** gRPC target of the notebook service, which owns samples */
  NOTEBOOK_ADDR: grpcTarget,
});

export interface OrdersOptions {
  /** the notebook's gRPC address (overrides NOTEBOOK_ADDR); a function is asked on first use */
  notebookAddress?: string | (() => string | undefined);
  /** overrides ORDERS_RESULTS_MAX_ROWS (default 2000) */
  resultRowCap?: number;
  /** overrides ORDERS_RESULTS_MAX_SAMPLES (default 1000) */
  sampleLookupCap?: number;
}

/** Lab orders with their samples, results recorded and released (module sample_intake). */
export function ordersDefinition(opts: OrdersOptions = {}): ServiceDefinition {
  return {
    name: 'orders',
    schema: 'orders',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    register: async (server, deps) => {
      const env = loadConfig(ordersEnv);
      const given = opts.notebookAddress;
      // Asked on first use: in one process the notebook may be started after this service.
      const address = typeof given === 'function' ? given : () => given ?? env.NOTEBOOK_ADDR ?? deps.peers('notebook');
      const samples = new NotebookSamples(address, deps.secret);
      registerHandlers(
        server,
        { db: deps.db, outbox: deps.outbox, samples },
        {
          rows: opts.resultRowCap ?? env.ORDERS_RESULTS_MAX_ROWS,
          samples: opts.sampleLookupCap ?? env.ORDERS_RESULTS_MAX_SAMPLES,
        },
      );
      return async () => samples.close();
    },
  };
}

export const definition: ServiceDefinition = ordersDefinition();
