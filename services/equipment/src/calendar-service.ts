import { equipmentCalendar } from '@lab/contracts';
import { DomainError, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { listCalendarEntries } from './calendar-entries.js';
import { createCalendarFeed, listCalendarFeeds, resolveCalendarFeed, revokeCalendarFeed } from './calendar-feeds.js';

/** The calendar feeds' RPCs (decision 060). */
export function registerCalendarHandlers(server: GrpcServer, deps: ServiceDeps): void {
  server.add(equipmentCalendar.EquipmentCalendarServiceService, {
    createCalendarFeed: (req, caller) => createCalendarFeed(deps, caller, req),
    listCalendarFeeds: (_req, caller) => listCalendarFeeds(deps, caller),
    revokeCalendarFeed: async (req, caller) => {
      await revokeCalendarFeed(deps, caller, req.id);
      return {};
    },
    // the gateway resolves a feed URL on its own behalf, before there is a caller to speak of
    resolveCalendarFeed: async (req, caller) => {
      if (caller.token_kind !== 'system') throw DomainError.forbidden('calendar feeds are resolved by the gateway only');
      return resolveCalendarFeed(deps, req);
    },
    listCalendarEntries: async (req, caller) => ({ entries: await listCalendarEntries(deps, caller, req.equipment_id) }),
  });
}
