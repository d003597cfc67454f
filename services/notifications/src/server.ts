import { notifications } from '@lab/contracts';
import type { GrpcServer, ServiceDeps } from '@lab/kit';
import { createNotifications, listNotifications, updateNotification } from './notifications.js';
import type { IdentityPeer } from './targets.js';

/** The notifications service's RPCs: create (targets resolved through identity), list and mark read. */
export function registerHandlers(server: GrpcServer, deps: ServiceDeps, identityPeer: IdentityPeer): void {
  server.add(notifications.NotificationsServiceService, {
    createNotifications: async (req, caller) => createNotifications(deps, identityPeer, caller, req.body),
    listNotifications: async (req, caller) => listNotifications(deps, caller, req.query),
    updateNotification: (req, caller) => updateNotification(deps, caller, req.id, req.body),
  });
}
