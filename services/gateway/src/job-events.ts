import type { Response } from 'express';
import type { Bus, BusMessage, Logger } from '@lab/kit';
import type { Principal } from './auth.js';

/** Comment lines keep proxies and clients from closing an idle stream. */
const HEARTBEAT_MS = 15_000;

interface JobUpdated {
  job: { id: string } & Record<string, unknown>;
  created_by?: string | null;
  created_by_token_id?: string | null;
}

interface Listener {
  principal: Principal;
  res: Response;
}

/**
 * Who may see a job: its creator, an administrator of its organisation, an
 * API key without a user for the jobs it created itself, or such a key with the
 * admin scope for all of them (the jobs service applies the same rule).
 */
export function maySee(p: Principal, orgId: string | null, e: JobUpdated): boolean {
  if (!orgId || p.org_id !== orgId) return false;
  if (p.user_id) return p.role === 'admin' || e.created_by === p.user_id;
  return p.scopes.includes('admin') || p.scopes.includes('*') || (!!e.created_by_token_id && e.created_by_token_id === p.token_id);
}

/**
 * The realtime channel background_jobs: one private, auto-deleted queue per
 * gateway replica bound to `job.updated`, fanned out to the replica's connected
 * server-sent-event clients, each getting only the jobs it may see.
 */
export class JobEventsHub {
  private readonly listeners = new Set<Listener>();

  constructor(private readonly log: Logger) {}

  async subscribe(bus: Bus, queue = 'gateway.job-events'): Promise<void> {
    await bus.subscribe({ queue, transient: true, bindings: ['job.updated'], handler: async (msg) => this.deliver(msg) });
  }

  private deliver(msg: BusMessage): void {
    const e = msg.data as JobUpdated;
    if (!e?.job?.id) return;
    const frame = `event: job.updated\nid: ${msg.id}\ndata: ${JSON.stringify(e.job)}\n\n`;
    for (const l of this.listeners) {
      if (maySee(l.principal, msg.org_id, e)) l.res.write(frame);
    }
  }

  /** Serves one client until it disconnects (or the gateway stops). */
  attach(principal: Principal, res: Response): Promise<void> {
    res.flushHeaders();
    res.write(': connected to background_jobs\n\n');
    const l: Listener = { principal, res };
    this.listeners.add(l);
    const beat = setInterval(() => res.write(': heartbeat\n\n'), HEARTBEAT_MS);
    beat.unref();
    return new Promise<void>((resolve) => {
      res.on('close', () => {
        clearInterval(beat);
        this.listeners.delete(l);
        resolve();
      });
    });
  }

  get size(): number {
    return this.listeners.size;
  }

  /** Ends every stream (gateway stop), so the server can close. */
  close(): void {
    for (const l of this.listeners) l.res.end();
    this.log.debug({ count: this.listeners.size }, 'realtime streams closed');
  }
}
