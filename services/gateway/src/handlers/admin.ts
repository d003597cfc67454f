import { z } from 'zod';
import {
  departmentObject,
  issuedApiKeyObject,
  issuedPatObject,
  memberObject,
  membershipObject,
  newDepartmentObject,
  newUserObject,
  oauthClientCredentialsObject,
  oauthClientObject,
  orgObject,
  tokenObject,
  userObject,
} from '@lab/contracts';
import { adminBodies, adminUsersQuery, uuidField, type AdminAction, json, noContent, withLocation, type Reply } from '@lab/http-api';
import { DomainError, isUuid } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { adminPage, listEnvelope } from './admin-page.js';
import { requireKnownOrg } from './known-org.js';
import { parseBody, parseWith } from '../validation.js';

const body = <S extends z.ZodType>(schema: S, ctx: Ctx): z.infer<S> => parseBody(schema, ctx.body, 'invalid request body');

/** An id of the path that names one thing: one that is not a UUID names nothing (404), like an unknown one. */
function itemParam(ctx: Ctx, key: string, what: string): string {
  const v = ctx.params[key] ?? '';
  if (!isUuid(v)) throw DomainError.notFound(`${what} not found`);
  return v.toLowerCase();
}

function param(ctx: Ctx, key: string): string {
  const v = ctx.params[key] ?? '';
  parseWith(z.object({ [key]: uuidField }), { [key]: v }, `${key} must be a UUID`);
  return v.toLowerCase();
}

/** The management API, mapped onto identity's RPCs. */
export async function adminHandler(ctx: Ctx, deps: Deps, action: AdminAction): Promise<Reply> {
  const idc = deps.clients.identity();
  const caller = callerIn(ctx);
  switch (action) {
    case 'createOrg': {
      const b = body(adminBodies.createOrg, ctx);
      const org = await idc.call('createOrg', { name: b.name, modules: b.modules ?? [], rate_limit: b.rate_limit }, caller);
      return withLocation(json(201, { data: orgObject(org) }), ctx.req.path, org.id);
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
      return json(200, { data: orgObject(org) });
    }
    case 'createDepartment': {
      const org_id = param(ctx, 'org_id');
      const b = body(adminBodies.createDepartment, ctx);
      const d = await idc.call('createDepartment', { org_id, name: b.name }, caller);
      return json(201, { data: newDepartmentObject(d) });
    }
    case 'createUser': {
      const b = body(adminBodies.createUser, ctx);
      const u = await idc.call('createUser', b, caller);
      return withLocation(json(201, { data: newUserObject(u) }), ctx.req.path, u.id);
    }
    case 'putMember': {
      const org_id = param(ctx, 'org_id');
      const user_id = param(ctx, 'user_id');
      const b = body(adminBodies.putMember, ctx);
      const m = await idc.call('putMember', { org_id, user_id, role: b.role, department_id: b.department_id ?? undefined }, caller);
      deps.auth.cache.dropMember(org_id, user_id);
      return json(200, { data: membershipObject(m) });
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
      return json(201, { data: issuedApiKeyObject(t) });
    }
    case 'createPat': {
      const user_id = param(ctx, 'user_id');
      const b = body(adminBodies.createPat, ctx);
      const t = await idc.call('createPat', { user_id, ...b }, caller);
      return json(201, { data: issuedPatObject(t) });
    }
    case 'createOAuthClient': {
      const b = body(adminBodies.createOAuthClient, ctx);
      const c = await idc.call('createOAuthClient', { name: b.name, redirect_uris: b.redirect_uris, scopes: b.scopes ?? [] }, caller);
      return withLocation(json(201, { data: oauthClientCredentialsObject(c) }), ctx.req.path, c.client_id);
    }
    case 'listOrgs': {
      const p = adminPage(ctx);
      const r = await idc.call('listOrgs', p, caller);
      return json(200, listEnvelope(r.orgs.map(orgObject), r.page, p));
    }
    case 'getOrg': {
      const org = await idc.call('getOrg', { org_id: param(ctx, 'org_id') }, caller);
      return json(200, { data: orgObject(org) });
    }
    case 'listDepartments': {
      const org_id = param(ctx, 'org_id');
      const p = adminPage(ctx);
      const r = await idc.call('listDepartments', { org_id, page: p, department_ids: [] }, caller);
      return json(200, listEnvelope(r.departments.map(departmentObject), r.page, p));
    }
    case 'deleteDepartment': {
      const org_id = param(ctx, 'org_id');
      const department_id = itemParam(ctx, 'id', 'department');
      await requireKnownOrg(org_id, ctx, deps);
      // identity refuses a department that members or records name (decision 056)
      await idc.call('deleteDepartment', { org_id, department_id }, caller);
      return noContent();
    }
    case 'listUsers': {
      const q = parseWith(adminUsersQuery, ctx.req.query, 'invalid query');
      const r = await idc.call('listUsers', { email: q.email, page: { limit: q.limit, offset: q.offset } }, caller);
      return json(200, listEnvelope(r.users.map(userObject), r.page, q));
    }
    case 'getUser': {
      const u = await idc.call('getUserMemberships', { user_id: param(ctx, 'user_id') }, caller);
      return json(200, { data: userObject(u) });
    }
    case 'listMembers': {
      const org_id = param(ctx, 'org_id');
      const p = adminPage(ctx);
      const r = await idc.call('listMembersPage', { org_id, page: p }, caller);
      return json(200, listEnvelope(r.members.map(memberObject), r.page, p));
    }
    case 'listApiKeys': {
      const org_id = param(ctx, 'org_id');
      const p = adminPage(ctx);
      const r = await idc.call('listTokens', { kind: 'api_key', org_id, page: p }, caller);
      return json(200, listEnvelope(r.tokens.map(tokenObject), r.page, p));
    }
    case 'listPats': {
      const user_id = param(ctx, 'user_id');
      const p = adminPage(ctx);
      const r = await idc.call('listTokens', { kind: 'pat', user_id, page: p }, caller);
      return json(200, listEnvelope(r.tokens.map(tokenObject), r.page, p));
    }
    case 'listOAuthClients': {
      const p = adminPage(ctx);
      const r = await idc.call('listOAuthClients', p, caller);
      return json(200, listEnvelope(r.clients.map(oauthClientObject), r.page, p));
    }
    case 'getOAuthClient': {
      const c = await idc.call('getOAuthClient', { client_id: itemParam(ctx, 'client_id', 'OAuth client') }, caller);
      return json(200, { data: oauthClientObject(c) });
    }
    case 'deleteOAuthClient': {
      await idc.call('deleteOAuthClient', { client_id: itemParam(ctx, 'client_id', 'OAuth client') }, caller);
      return noContent();
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
