import { runServiceMain } from '@lab/kit';
import { definition } from './index.js';

void runServiceMain(definition);
