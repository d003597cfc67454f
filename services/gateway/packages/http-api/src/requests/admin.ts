import { z } from 'zod';
import { isAllowedRedirectUri, MODULES, MODULES_MAX_ITEMS, ROLES } from '@lab/identity';
import { isUuid, rateLimitBody } from '@lab/kit';
import type { AdminAction } from '../operations.js';
import { SCOPES } from '@lab/permissions';
import { adminPageFields, adminPageQuery } from './admin-page.js';

/** A UUID (any case); format only documents the check in the OpenAPI document (z.toJSONSchema). */
export const uuidField = z.string().refine(isUuid, 'must be a UUID').meta({ format: 'uuid' });
const name = z.string().trim().min(1).max(200);
const rateLimit = rateLimitBody.strict();
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
  createUser: z.object({ email: z.string().trim().pipe(z.email().max(320)), name: name.optional(), password: z.string().min(8).max(1024).optional() }).strict(),
  putMember: z.object({ role: z.enum(ROLES), department_id: uuidField.nullish() }).strict(),
  createApiKey: z
    .object({ name, scopes, user_id: uuidField.optional(), connector_id: uuidField.optional(), device_ids: z.array(uuidField).max(1000).optional() })
    .strict(),
  createPat: z.object({ name, scopes, org_id: uuidField.optional() }).strict(),
  createOAuthClient: z
    .object({
      name,
      redirect_uris: z
        .array(
          z
            .string()
            .max(2000)
            .refine(isAllowedRedirectUri, 'must be an https URI, or http on localhost or 127.0.0.1, without fragment, backslash or control character'),
        )
        .min(1)
        .max(20),
      scopes: scopes.optional(),
    })
    .strict(),
};

/** GET /admin/v1/users: a page, optionally only the user of one email. */
export const adminUsersQuery = z.object({ ...adminPageFields, email: z.string().trim().min(1).max(320).optional() }).strict();

/** Query of each management list of identity's (the document describes them from these). */
export const adminQueries: Partial<Record<AdminAction, z.ZodType>> = {
  listOrgs: adminPageQuery,
  listDepartments: adminPageQuery,
  listUsers: adminUsersQuery,
  listMembers: adminPageQuery,
  listApiKeys: adminPageQuery,
  listPats: adminPageQuery,
  listOAuthClients: adminPageQuery,
};
