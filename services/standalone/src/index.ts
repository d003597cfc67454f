export { startStandalone, standaloneEnv, type Standalone, type StandaloneConfig } from './standalone.js';
