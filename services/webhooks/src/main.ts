import './tracing.js';
import { runServiceMain } from '@lab/kit';
import { definition } from './index.js';

runServiceMain(definition);
