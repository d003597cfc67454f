export * from './backing.js';
export * from './stack.js';
export * from './cluster.js';
export * from './service-harness.js';
export * from './held-locks.js';
export * from './reference-owners.js';
export * from './otlp-receiver.js';
export * from './tcp-proxy.js';
