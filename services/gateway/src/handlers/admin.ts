import { z } from 'zod';
import type { identity } from '@lab/contracts';
import { isAllowedRedirectUri, MODULES, MODULES_MAX_ITEMS, ROLES } from '@lab/identity';
import { isUuid } from '@lab/kit';
import { json, noContent, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import type { AdminAction } from '../routes.js';
import { SCOPES } from '../scopes.js';
import { parseBody, parseWith } from '../validation.js';

// format only documents the check in the OpenAPI document (z.toJSONSchema)
const uuid = z.string().refine(isUuid, 'must be a UUID').meta({ format: 'uuid' });
const name = z.string().trim().min(1).max(200);
const rateLimit = z.object({ per_minute: z.number().int().min(1).max(1_000_000), per_hour: z.number().int().min(1).max(100_000_000) }).strict();
// the identity service's own limit, so the document says what it enforces
const modules = z.array(z.enum(MODULES)).max(MODULES_MAX_ITEMS);
const scopes = z.array(z.enum(SCOPES)).min(1).max(16);

/** Bodies of the management API (MANAGEMENT_API.md); unknown fields are refused. */
export const adminBodies = {
  createOrg: z.object({ name, modules: modules.optional(), rate_limit: rateLimit.optional() }).strict(),
  updateOrg: z
    .object({ name: name.optional(), modules: modules.optional(), rate_limit: rateLimit.optional() })
    .strict()
    .refine((b) => b.name !== undefined || b.modules !== undefined || b.rate_limit !== undefined, 'nothing to change'),
  createDepartment: z.object({ name }).strict(),
  createUser: z
    .object({ email: z.string().trim().pipe(z.email().max(320)), name: name.optional(), password: z.string().min(8).max(1024).optional() })
    .strict(),
  putMember: z.object({ role: z.enum(ROLES), department_id: uuid.nullish() }).strict(),
  createApiKey: z
    .object({ name, scopes, user_id: uuid.optional(), connector_id: uuid.optional(), device_ids: z.array(uuid).max(1000).optional() })
    .strict(),
  createPat: z.object({ name, scopes, org_id: uuid.optional() }).strict(),
  createOAuthClient: z
    .object({
      name,
      redirect_uris: z
        .array(z.string().max(2000).refine(isAllowedRedirectUri, 'must be an https URI, or http on localhost or 127.0.0.1, without fragment'))
        .min(1)
        .max(20),
      scopes: scopes.optional(),
    })
    .strict(),
};

const body = <S extends z.ZodType>(schema: S, ctx: Ctx): z.infer<S> => parseBody(schema, ctx.body, 'invalid request body');

function param(ctx: Ctx, key: string): string {
  const v = ctx.params[key] ?? '';
  parseWith(z.object({ [key]: uuid }), { [key]: v }, `${key} must be a UUID`);
  return v.toLowerCase();
}

const orgView = (o: identity.Org) => ({
  id: o.id,
  name: o.name,
  modules: o.modules,
  rate_limit: o.rate_limit ?? null,
  created_at: o.created_at || undefined,
});

/** The management API, mapped onto identity's RPCs. */
export async function adminHandler(ctx: Ctx, deps: Deps, action: AdminAction): Promise<Reply> {
  const idc = deps.clients.identity();
  const caller = callerIn(ctx);
  switch (action) {
    case 'createOrg': {
      const b = body(adminBodies.createOrg, ctx);
      const org = await idc.call('createOrg', { name: b.name, modules: b.modules ?? [], rate_limit: b.rate_limit }, caller);
      return json(201, { data: orgView(org) });
    }
    case 'updateOrg': {
      const org_id = param(ctx, 'org_id');
      const b = body(adminBodies.updateOrg, ctx);
      const org = await idc.call(
        'updateOrg',
        { org_id, name: b.name, modules: b.modules ? { modules: b.modules } : undefined, rate_limit: b.rate_limit },
        caller,
      );
      deps.auth.cache.dropOrg(org_id);
      return json(200, { data: orgView(org) });
    }
    case 'createDepartment': {
      const org_id = param(ctx, 'org_id');
      const b = body(adminBodies.createDepartment, ctx);
      const d = await idc.call('createDepartment', { org_id, name: b.name }, caller);
      return json(201, { data: { id: d.id, org_id: d.org_id, name: d.name } });
    }
    case 'createUser': {
      const b = body(adminBodies.createUser, ctx);
      const u = await idc.call('createUser', b, caller);
      return json(201, { data: { id: u.id, email: u.email, name: u.name ?? null } });
    }
    case 'putMember': {
      const org_id = param(ctx, 'org_id');
      const user_id = param(ctx, 'user_id');
      const b = body(adminBodies.putMember, ctx);
      const m = await idc.call('putMember', { org_id, user_id, role: b.role, department_id: b.department_id ?? undefined }, caller);
      deps.auth.cache.dropMember(org_id, user_id);
      return json(200, { data: { org_id: m.org_id, user_id: m.user_id, role: m.role, department_id: m.department_id ?? null } });
    }
    case 'deleteMember': {
      const org_id = param(ctx, 'org_id');
      const user_id = param(ctx, 'user_id');
      await idc.call('deleteMember', { org_id, user_id }, caller);
      deps.auth.cache.dropMember(org_id, user_id);
      return noContent();
    }
    case 'createApiKey': {
      const org_id = param(ctx, 'org_id');
      const b = body(adminBodies.createApiKey, ctx);
      // identity keeps the binding; telemetry knows whether its records are this organisation's
      if (b.connector_id || b.device_ids?.length) {
        await deps.clients.telemetry().call('checkKeyBindings', { org_id, connector_id: b.connector_id ?? '', device_ids: b.device_ids ?? [] }, caller);
      }
      const t = await idc.call('createApiKey', { org_id, ...b, device_ids: b.device_ids ?? [] }, caller);
      return json(201, { data: { id: t.id, token: t.token, scopes: t.scopes, user_id: t.user_id ?? null } });
    }
    case 'createPat': {
      const user_id = param(ctx, 'user_id');
      const b = body(adminBodies.createPat, ctx);
      const t = await idc.call('createPat', { user_id, ...b }, caller);
      return json(201, { data: { id: t.id, token: t.token, scopes: t.scopes, org_id: t.org_id ?? null } });
    }
    case 'createOAuthClient': {
      const b = body(adminBodies.createOAuthClient, ctx);
      const c = await idc.call('createOAuthClient', { name: b.name, redirect_uris: b.redirect_uris, scopes: b.scopes ?? [] }, caller);
      return json(201, { data: { client_id: c.client_id, client_secret: c.client_secret } });
    }
    case 'revokeToken': {
      const token_id = param(ctx, 'token_id');
      await idc.call('revokeToken', { token_id }, caller);
      // This replica forgets the token at once; the others on identity's event.
      deps.auth.cache.dropToken(token_id);
      return noContent();
    }
  }
}
