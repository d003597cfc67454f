/** Domain vocabulary shared by the modules of this service. */
export const MODULES = ['lab_equipment', 'analytics_qc', 'sample_intake'] as const;
export type Module = (typeof MODULES)[number];

// The roles are the permission model's (libs/permissions): identity stores them, it does not define them.
export { ROLES, type Role } from '@lab/permissions';

export const DEFAULT_RATE_LIMIT = { per_minute: 120, per_hour: 5000 } as const;

/** Lifetimes of the tokens of a user sign-in. */
export const SESSION_ACCESS_TTL_SECONDS = 3600;
export const SESSION_REFRESH_TTL_SECONDS = 30 * 24 * 3600;
/** What a signed-in user's access token may do; role and record rules still apply. */
export const SESSION_SCOPES = ['read', 'write'] as const;

/** Lifetimes of OAuth tokens; the code lifetime is configurable (IDENTITY_OAUTH_CODE_TTL_SECONDS). */
export const OAUTH_ACCESS_TTL_SECONDS = 3600;
export const OAUTH_REFRESH_TTL_SECONDS = 30 * 24 * 3600;
export const OAUTH_CODE_TTL_SECONDS = 60;
/** Scopes of a client registered without any. */
export const OAUTH_DEFAULT_CLIENT_SCOPES = ['read'] as const;
