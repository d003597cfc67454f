import { v7, validate } from 'uuid';
import { randomBytes } from 'node:crypto';

/** Time-ordered ids (UUIDv7): good index locality, sortable by creation. */
export const newId = (): string => v7();

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (v: unknown): v is string => typeof v === 'string' && UUID_RE.test(v) && validate(v);

/** URL-safe random secret of n bytes of entropy. */
export const randomToken = (bytes = 32): string => randomBytes(bytes).toString('base64url');
