import path from 'node:path';
import { identity } from '@lab/contracts';
import { PeerClient, type ServiceDefinition } from '@lab/kit';
import { consumeReactions } from './reactions.js';
import { purgeExpired } from './retention.js';
import { registerHandlers } from './server.js';
import { notificationsSettings, type NotificationsSettings } from './settings.js';

export interface NotificationsOptions {
  /** identity's gRPC address; default the address book (deps.peers: IDENTITY_ADDR in the cluster), read when first needed */
  identityAddress?: string;
  /** settings over the environment's (tests) */
  settings?: Partial<NotificationsSettings>;
}

/** In-app notifications: on request (POST /v1/notifications) and from events. */
export function notificationsDefinition(opts: NotificationsOptions = {}): ServiceDefinition {
  let settings: NotificationsSettings | undefined;
  return {
    name: 'notifications',
    schema: 'notifications',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    async register(server, deps) {
      settings = notificationsSettings(opts.settings);
      const peer = new PeerClient(identity.IdentityServiceClient, 'identity', deps.secret, opts.identityAddress ?? deps.peers);
      registerHandlers(server, deps, peer);
      await consumeReactions(deps, peer, settings);
      return async () => peer.close();
    },
    retention: (deps) => [['notifications', () => purgeExpired(deps.db, settings!.retentionDays)]],
  };
}

export const definition = notificationsDefinition();
export { planFor } from './reactions.js';
export { isHttpLink, notificationSchemas, parseCreate } from './notifications.js';
