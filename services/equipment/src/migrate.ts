import { runMigrationsMain } from '@lab/kit';
import { definition } from './index.js';

/** Entry of the chart's migration hook Job: applies this service's migrations, then exits. */
void runMigrationsMain(definition);
