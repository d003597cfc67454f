import { assertOperator, DomainError, isUuid, type CallerContext, type GrpcServer, type Handlers, type ServiceDeps } from '@lab/kit';
import { identity } from '@lab/contracts';
import { deleteMember, listMembers, listUserOrgs, putMember } from './members.js';
import { OAUTH_DEFAULT_CLIENT_SCOPES } from './model.js';
import { createOAuthClient, deleteOAuthClient, getOAuthClient, registerPublicOAuthClient } from './oauth-clients.js';
import { getUserMemberships, listDepartments, listMembersPage, listOAuthClients, listOrgs, listTokens, listUsers } from './management-reads.js';
import { useOAuthForm } from './oauth-forms.js';
import { createOAuthCode, exchangeOAuthCode, refreshOAuthToken } from './oauth-grants.js';
import { createDepartment, createOrg, deleteDepartment, getOrg, updateOrg } from './orgs.js';
import { resolveSessionUser, resolveToken } from './resolve.js';
import { passwordGrant, refreshGrant } from './sessions.js';
import { createApiKey, createPat, revokeToken } from './token-store.js';
import { checkCredentials, createUser, getUser, verifyUserPassword } from './users.js';
import { parse, schemas as s } from './validation.js';

/**
 * The gRPC edge: every request is validated here, then handed to the domain
 * module that owns it. The management RPCs (MANAGEMENT_ONLY) are the operator's:
 * the gateway reaches them only with the operator token, and identity refuses
 * any other caller itself rather than trusting every peer to ask first. Beyond
 * that, the signed caller context is what gets audited.
 */
export interface IdentityOptions {
  /** lifetime of OAuth authorization codes */
  oauthCodeTtlSeconds: number;
}

type IdentityHandlers = Handlers<typeof identity.IdentityServiceService>;

/**
 * The RPCs behind the management API only (organisations, their rate limits and
 * modules, departments, users, members, tokens, OAuth client registration):
 * operator token only. Not here: what the gateway also calls for /v1 callers or
 * on its own behalf (getOrg, getUser, listMembers, listDepartments,
 * getOAuthClient, registerPublicOAuthClient, token resolution and the grants).
 */
export const MANAGEMENT_ONLY = [
  'createOrg',
  'updateOrg',
  'listOrgs',
  'createDepartment',
  'deleteDepartment',
  'createUser',
  'listUsers',
  'getUserMemberships',
  'putMember',
  'deleteMember',
  'listMembersPage',
  'createApiKey',
  'createPat',
  'listTokens',
  'revokeToken',
  'createOAuthClient',
  'listOAuthClients',
  'deleteOAuthClient',
] as const satisfies readonly (keyof IdentityHandlers)[];

/** The handlers with the operator check in front of each management-only one. */
function withOperatorCheck(handlers: IdentityHandlers): IdentityHandlers {
  const checked = { ...handlers };
  for (const name of MANAGEMENT_ONLY) {
    const handler = handlers[name] as (req: unknown, caller: CallerContext) => Promise<unknown>;
    (checked as Record<string, unknown>)[name] = (req: unknown, caller: CallerContext) => {
      assertOperator(caller, 'managing organisations, users and tokens');
      return handler(req, caller);
    };
  }
  return checked;
}

export function registerHandlers(server: GrpcServer, deps: ServiceDeps, opts: IdentityOptions): void {
  server.add(
    identity.IdentityServiceService,
    withOperatorCheck({
      resolveToken: async (req) => {
        const r = parse(s.resolveToken, req);
        return resolveToken(deps, r.token_hash, r.org_id);
      },
      createOrg: async (req, caller) => createOrg(deps, caller, parse(s.createOrg, req)),
      updateOrg: async (req, caller) => updateOrg(deps, caller, parse(s.updateOrg, req)),
      getOrg: async (req) => getOrg(deps, parse(s.orgId, req).org_id),
      createDepartment: async (req, caller) => createDepartment(deps, caller, parse(s.createDepartment, req)),
      createUser: async (req, caller) => createUser(deps, caller, parse(s.createUser, req)),
      getUser: async (req) => getUser(deps, parse(s.userId, req).user_id),
      putMember: async (req, caller) => putMember(deps, caller, parse(s.putMember, req)),
      deleteMember: async (req, caller) => {
        await deleteMember(deps, caller, parse(s.member, req));
        return {};
      },
      listMembers: async (req) => ({ members: await listMembers(deps, parse(s.listMembers, req)) }),
      createApiKey: async (req, caller) => createApiKey(deps, caller, parse(s.createApiKey, req)),
      createPat: async (req, caller) => createPat(deps, caller, parse(s.createPat, req)),
      revokeToken: async (req, caller) => {
        await revokeToken(deps, caller, parse(s.tokenId, req).token_id);
        return {};
      },
      passwordGrant: async (req, caller) => {
        const r = parse(s.passwordGrant, req);
        return passwordGrant(deps, caller, r.email, r.password);
      },
      refreshGrant: async (req, caller) => refreshGrant(deps, caller, parse(s.refreshGrant, req).refresh_token),
      verifyPassword: async (req) => {
        const r = parse(s.verifyPassword, req);
        await verifyUserPassword(deps, r.user_id, r.password);
        return {};
      },
      createOAuthClient: async (req, caller) => {
        const r = parse(s.createOAuthClient, req);
        return createOAuthClient(deps, caller, { ...r, scopes: r.scopes.length ? r.scopes : [...OAUTH_DEFAULT_CLIENT_SCOPES] });
      },
      registerPublicOAuthClient: async (req, caller) => {
        const r = parse(s.registerPublicOAuthClient, req);
        return registerPublicOAuthClient(deps, caller, { ...r, scopes: r.scopes.length ? r.scopes : [...OAUTH_DEFAULT_CLIENT_SCOPES] });
      },
      getOAuthClient: async (req) => getOAuthClient(deps, parse(s.oauthClientId, req).client_id),
      checkCredentials: async (req) => {
        const r = parse(s.passwordGrant, req);
        return checkCredentials(deps, r.email, r.password);
      },
      resolveSessionUser: async (req) => resolveSessionUser(deps, parse(s.tokenHash, req).token_hash),
      listUserOrgs: async (req) => ({ orgs: await listUserOrgs(deps, parse(s.userId, req).user_id) }),
      createOAuthCode: async (req, caller) => createOAuthCode(deps, caller, parse(s.createOAuthCode, req), opts.oauthCodeTtlSeconds),
      exchangeOAuthCode: async (req, caller) => exchangeOAuthCode(deps, caller, parse(s.exchangeOAuthCode, req)),
      refreshOAuthToken: async (req, caller) => refreshOAuthToken(deps, caller, parse(s.refreshOAuthToken, req)),
      useOAuthForm: async (req) => {
        await useOAuthForm(deps, parse(s.useOAuthForm, req));
        return {};
      },

      listOrgs: async (req) => listOrgs(deps, parse(s.page, req)),
      listDepartments: async (req) => {
        const r = parse(s.listDepartments, req);
        return listDepartments(deps, r.org_id, r.page, r.department_ids);
      },
      deleteDepartment: async (req, caller) => {
        await deleteDepartment(deps, caller, parse(s.deleteDepartment, req));
        return {};
      },
      listUsers: async (req) => {
        const r = parse(s.listUsers, req);
        return listUsers(deps, r.email, r.page);
      },
      getUserMemberships: async (req) => getUserMemberships(deps, parse(s.userId, req).user_id),
      listMembersPage: async (req) => {
        const r = parse(s.orgPage, req);
        return listMembersPage(deps, r.org_id, r.page);
      },
      listTokens: async (req) => {
        const r = parse(s.listTokens, req);
        return listTokens(deps, r, r.page);
      },
      listOAuthClients: async (req) => listOAuthClients(deps, parse(s.page, req)),
      deleteOAuthClient: async (req, caller) => {
        const { client_id } = parse(s.oauthClientId, req);
        if (!isUuid(client_id)) throw DomainError.notFound('no such OAuth client');
        await deleteOAuthClient(deps, caller, client_id.toLowerCase());
        return {};
      },
    }),
  );
}
