import { envInt, loadConfig } from '@lab/kit';
import { z } from 'zod';

export interface NotificationsSettings {
  /** notifications older than this are removed (retention.ts) */
  retentionDays: number;
  /** after a point's breach alert, its further breaches stay quiet this long (breach-alerts.ts); 0 alerts on every one */
  breachQuietMinutes: number;
}

const env = z.object({
  LAB_NOTIFICATIONS_RETENTION_DAYS: envInt(365, 7, 36_500),
  LAB_NOTIFICATIONS_BREACH_QUIET_MINUTES: envInt(60, 0, 10_080),
});

/** Read when the service starts; `overrides` (tests) win. */
export function notificationsSettings(overrides: Partial<NotificationsSettings> = {}, source: NodeJS.ProcessEnv = process.env): NotificationsSettings {
  const e = loadConfig(env, source);
  return { retentionDays: e.LAB_NOTIFICATIONS_RETENTION_DAYS, breachQuietMinutes: e.LAB_NOTIFICATIONS_BREACH_QUIET_MINUTES, ...overrides };
}
