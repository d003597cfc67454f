import { initEmbeddedDataDir } from './embedded-data-dir.js';

/** Child process of prepareEmbeddedDataDir: `node embedded-init.js <data dir>`. */
const dataDir = process.argv[2];
if (!dataDir) {
  process.stderr.write('usage: embedded-init.js <data dir>\n');
  process.exit(64);
}
initEmbeddedDataDir(dataDir).then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`preparing the embedded database in ${dataDir} failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
