import { z } from 'zod';
import type { notifications } from '@lab/contracts';
import { DomainError, fieldIssues, isGuid, parseWith, structBody, validationFailed, type CallerContext, type ServiceDeps } from '@lab/kit';
import { insertNotifications, listForUser, setRead, type NotificationContent } from './store.js';
import { resolveMembers, type IdentityPeer, type Targets } from './targets.js';

const uuid = z.string().refine(isGuid, 'must be a UUID');

/** The create body with the spec's bounds; unknown fields are refused. */
const createBody = z.strictObject({
  title: z.string().min(1).max(200),
  body: z.string().max(2000).nullish(),
  notification_type: z.string().min(1).max(64).default('external'),
  link_url: z.string().max(2000).nullish(),
  entry_id: uuid.nullish(),
  user_id: uuid.optional(),
  user_ids: z.array(uuid).min(1).max(500).optional(),
  role: z.string().min(1).max(64).optional(),
});

const TARGET_KEYS = ['user_id', 'user_ids', 'role'] as const;

/** A link must be an absolute http(s) URL; anything else is its own 400 code. */
export function isHttpLink(v: string): boolean {
  if (!/^https?:\/\//i.test(v)) return false;
  try {
    const u = new URL(v);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/** Validates a create body: bounds, exactly one target kind, then the link. */
export function parseCreate(body: Record<string, unknown> | undefined): { content: NotificationContent; targets: Targets } {
  const raw = structBody(body);
  const parsed = createBody.safeParse(raw, { reportInput: true });
  if (!parsed.success) throw validationFailed(fieldIssues(parsed.error));
  const b = parsed.data;
  const given = TARGET_KEYS.filter((k) => b[k] !== undefined);
  if (given.length !== 1) {
    const paths = given.length ? given : TARGET_KEYS;
    throw validationFailed(
      paths.map((path) => ({ path, message: 'exactly one of user_id, user_ids, role is required' })),
      'exactly one of user_id, user_ids, role is required',
    );
  }
  if (b.link_url != null && !isHttpLink(b.link_url)) {
    throw DomainError.invalid('link_url must begin with http:// or https://', { field: 'link_url' }, 'invalid_link_url');
  }
  const targets: Targets = b.role !== undefined ? { role: b.role } : { user_ids: b.user_ids ?? [b.user_id!] };
  return {
    content: {
      notification_type: b.notification_type,
      title: b.title,
      body: b.body ?? null,
      link_url: b.link_url ?? null,
      entry_id: b.entry_id?.toLowerCase() ?? null,
    },
    targets,
  };
}

function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('an organisation is required', 'org_required');
  return caller.org_id;
}

/** POST /v1/notifications: one notification per member among the targets. */
export async function createNotifications(deps: ServiceDeps, identity: IdentityPeer, caller: CallerContext, body: Record<string, unknown> | undefined) {
  const org_id = orgOf(caller);
  const { content, targets } = parseCreate(body);
  // Asked before the transaction: on the embedded database a call into identity
  // from inside it would wait for it.
  const members = await resolveMembers(identity, caller, org_id, targets);
  if (!members.length) {
    throw DomainError.invalid('none of the recipients is a member of the organisation', undefined, 'no_valid_targets');
  }
  const answer = (ids: string[]) => ({ created: ids.length, notification_ids: ids });
  return answer(await deps.outbox.write(caller, (tx, emit) => insertNotifications(tx, emit, org_id, members, content), answer));
}

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  offset: z.coerce.number().int().min(0).max(1_000_000).default(0),
});

/**
 * GET /v1/notifications: the notifications of the user the token stands for.
 * A token without a user (an unbound API key) has none.
 */
export async function listNotifications(deps: ServiceDeps, caller: CallerContext, query: Record<string, string>) {
  const org_id = orgOf(caller);
  const q = parseWith(listQuery, query);
  if (!caller.user_id) return { notifications: [], count: 0, total: 0, ...q };
  const page = await listForUser(deps.db.orm, org_id, caller.user_id, q.limit, q.offset);
  return { ...page, ...q };
}

const updateBody = z.strictObject({ read: z.boolean() });

/** What the notification routes take (the gateway documents them from these). */
export const notificationSchemas = { create: createBody, list: listQuery, update: updateBody };

/** PATCH /v1/notifications/{id}: the owner marks it read (read_at now) or unread. */
export async function updateNotification(
  deps: ServiceDeps,
  caller: CallerContext,
  id: string,
  body: Record<string, unknown> | undefined,
): Promise<notifications.NotificationResponse> {
  const org_id = orgOf(caller);
  if (!isGuid(id) || !caller.user_id) throw DomainError.notFound('notification not found');
  const { read } = parseWith(updateBody, structBody(body));
  return deps.outbox.write(
    caller,
    async (tx, emit) => {
      const r = await setRead(tx, org_id, caller.user_id!, id.toLowerCase(), read);
      if (!r) throw DomainError.notFound('notification not found');
      emit.audit(org_id, { action: 'update', resource: 'notifications', record_id: id.toLowerCase(), before: r.before, after: r.after });
      return { notification: r.notification };
    },
    (answer) => answer,
  );
}
