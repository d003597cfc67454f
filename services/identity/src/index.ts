import path from 'node:path';
import { envInt, loadConfig, type ServiceDefinition } from '@lab/kit';
import { z } from 'zod';
import { OAUTH_CODE_TTL_SECONDS } from './model.js';
import { configurePasswordChecks, DEFAULT_RUNNING_CHECKS, preparePasswordChecks, QUEUED_CHECKS_PER_RUNNING } from './passwords.js';
import { purgeExpiredCodes, purgeExpiredTokens, purgeUsedForms } from './retention.js';
import { consumeReferenceChanges, purgeStaleHolds, registerDepartmentReferences } from './department-references.js';
import { registerHandlers } from './server.js';

export const definition: ServiceDefinition = {
  name: 'identity',
  schema: 'identity',
  migrationsDir: path.join(__dirname, '..', 'migrations'),
  register: async (server, deps) => {
    await preparePasswordChecks();
    // Read when the service starts, so a test stack can shorten the code lifetime.
    const env = loadConfig(
      z.object({
        IDENTITY_OAUTH_CODE_TTL_SECONDS: envInt(OAUTH_CODE_TTL_SECONDS, 1, 600),
        // libuv's pool has at most 1024 threads: more running checks than that could never run.
        IDENTITY_PASSWORD_CHECKS_RUNNING: envInt(DEFAULT_RUNNING_CHECKS, 1, 1024),
        IDENTITY_PASSWORD_CHECKS_QUEUED: envInt(DEFAULT_RUNNING_CHECKS * QUEUED_CHECKS_PER_RUNNING, 0, 100_000),
      }),
    );
    configurePasswordChecks({ running: env.IDENTITY_PASSWORD_CHECKS_RUNNING, queued: env.IDENTITY_PASSWORD_CHECKS_QUEUED });
    registerHandlers(server, deps, { oauthCodeTtlSeconds: env.IDENTITY_OAUTH_CODE_TTL_SECONDS });
    registerDepartmentReferences(server, deps);
    await consumeReferenceChanges(deps);
  },
  retention: (deps) => [
    ['expired tokens', () => purgeExpiredTokens(deps.db)],
    ['expired OAuth codes', () => purgeExpiredCodes(deps.db)],
    ['expired consent forms', () => purgeUsedForms(deps.db)],
    ['stale department holds', () => purgeStaleHolds(deps.db)],
  ],
};

export { hashToken, parseApiKeyOrg, tokenKindOf, type TokenKind } from './tokens.js';
export { SCOPES, isScope, type Scope } from '@lab/permissions';
export { isAllowedRedirectUri, MODULES_MAX_ITEMS, redirectUriRegistered } from './validation.js';
export { MODULES, ROLES, type Module, type Role } from './model.js';
