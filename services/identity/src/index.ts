import path from 'node:path';
import { envInt, loadConfig, type ServiceDefinition } from '@lab/kit';
import { z } from 'zod';
import { OAUTH_CODE_TTL_SECONDS } from './model.js';
import { preparePasswordChecks } from './passwords.js';
import { registerIdentity } from './server.js';

export const definition: ServiceDefinition = {
  name: 'identity',
  schema: 'identity',
  migrationsDir: path.join(__dirname, '..', 'migrations'),
  register: async (server, deps) => {
    await preparePasswordChecks();
    // Read when the service starts, so a test stack can shorten the code lifetime.
    const env = loadConfig(z.object({ IDENTITY_OAUTH_CODE_TTL_SECONDS: envInt(OAUTH_CODE_TTL_SECONDS, 1, 600) }));
    registerIdentity(server, deps, { oauthCodeTtlSeconds: env.IDENTITY_OAUTH_CODE_TTL_SECONDS });
  },
};

export { hashToken, parseApiKeyOrg, tokenKindOf, type TokenKind } from './tokens.js';
export { SCOPES, hasScope, isScope, type Scope } from './scopes.js';
export { isAllowedRedirectUri } from './validation.js';
export { MODULES, ROLES, type Module, type Role } from './model.js';
