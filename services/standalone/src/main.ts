import './tracing.js';
import { createLogger, exitOnFailure, loadConfig, stopOnSignals } from '@lab/kit';
import { prepareEmbeddedDataDir } from './embedded-data-dir.js';
import { standaloneEnv, startStandalone, type StandaloneConfig } from './standalone.js';

const log = createLogger('lab');

async function main() {
  let cfg: StandaloneConfig;
  try {
    cfg = loadConfig(standaloneEnv);
  } catch (err) {
    log.fatal((err as Error).message);
    process.exit(78);
  }
  // in a child process, so first-start memory does not stay with the server
  if (!cfg.DATABASE_URL) await prepareEmbeddedDataDir(cfg.LAB_DATA_DIR, log);
  const lab = await startStandalone(cfg, log);
  log.info(
    {
      url: lab.url,
      data_dir: cfg.LAB_DATA_DIR,
      database: cfg.DATABASE_URL ? 'postgresql' : 'embedded',
      bus: cfg.AMQP_URL ? 'rabbitmq' : 'in-process',
      operator_token_file: lab.operatorTokenFile,
    },
    `lab notebook service ready on ${lab.url}` + (lab.operatorTokenFile ? ` (operator token in ${lab.operatorTokenFile})` : ''),
  );
  stopOnSignals(
    log,
    async () => {
      await lab.stop();
      log.info('stopped');
    },
    'stopping: finishing in-flight requests and flushing outboxes',
    // no drain unless asked for: nothing balances in front of the embedded process
    // (`npm start`), so nothing needs the time to stop sending to it
    { ms: cfg.LAB_SHUTDOWN_DRAIN_MS ?? 0, begin: () => lab.drain() },
  );
}

exitOnFailure(log, main());
