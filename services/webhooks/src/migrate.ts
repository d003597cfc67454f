import { runMigrationsMain } from '@lab/kit';
import { definition } from './index.js';

void runMigrationsMain(definition);
