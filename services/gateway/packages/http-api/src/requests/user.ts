import { z } from 'zod';
import { MEANINGS } from '@lab/notebook';

/** POST /auth/v1/token: user sign-in with a password or a refresh token. */
export const grantBody = z.discriminatedUnion('grant_type', [
  z.object({ grant_type: z.literal('password'), email: z.string().min(1).max(320), password: z.string().min(1).max(1024) }),
  z.object({ grant_type: z.literal('refresh_token'), refresh_token: z.string().min(1).max(200) }),
]);

/** POST /app/v1/experiments/:id/sign: the re-entered password, and what the signature means. */
export const signBody = z.object({
  password: z.string().min(1).max(1024),
  // what the signature means; authorship when absent (the one signature there was before)
  meaning: z.enum(MEANINGS).optional(),
});
