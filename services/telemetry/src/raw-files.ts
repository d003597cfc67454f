import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { telemetry } from '@lab/contracts';
import { assertNotViewer, DomainError, newId, parseWith, type CallerContext, type ServiceDeps } from '@lab/kit';
import { orgOf, text, uuid } from './common.js';
import { rawFileLimit } from './raw-file-limits.js';
import { deviceById, insertResult } from './results.js';
import type { FileStorage } from './storage.js';

const metaSchema = z.object({
  device_id: uuid,
  filename: text(255).refine((s) => !s.includes('\0'), 'must not contain NUL'),
  content_type: z.string().trim().max(255).transform((s) => s || 'application/octet-stream'),
});

const tooLarge = (limit: number) =>
  new DomainError('too_large', 'payload_too_large', `the file exceeds ${limit / (1024 * 1024)} MiB`, { limit_bytes: limit });

/**
 * POST /v1/results/upload behind the gateway: the first message names the device
 * and the file, the others carry its bytes. The bytes stream into storage (hashed
 * and counted on the way, never held whole); then a raw_files row and a result
 * linked to it commit together. A failed commit removes the stored file.
 */
export function rawFileHandlers(deps: ServiceDeps, storage: FileStorage) {
  return {
    uploadRawFile: async (input: AsyncIterable<telemetry.UploadChunk>, caller: CallerContext): Promise<telemetry.JsonResponse> => {
      const org = orgOf(caller);
      assertNotViewer(caller);
      const messages = input[Symbol.asyncIterator]();
      const first = await messages.next();
      if (first.done || !first.value.meta) throw DomainError.invalid('the first message must carry the upload metadata');
      const meta = parseWith(metaSchema, first.value.meta);
      const limit = rawFileLimit(meta.filename, meta.content_type);
      // the device is checked before a byte is stored
      const device = await deviceById(deps.db.orm, org, caller, meta.device_id);

      async function* bytes(): AsyncGenerator<Buffer> {
        let size = 0;
        let next: IteratorResult<telemetry.UploadChunk> = first;
        while (!next.done) {
          const data = next.value.data;
          size += data.length;
          if (size > limit) throw tooLarge(limit);
          if (data.length) yield data;
          next = await messages.next();
        }
      }
      const stored = await storage.put(bytes());
      try {
        const answer = (json: string): telemetry.JsonResponse => ({ json, created: true });
        const json = await deps.outbox.write(caller, async (tx, emit) => {
          const fileId = newId();
          await tx.execute(sql`insert into telemetry.raw_files (id, org_id, device_id, filename, content_type, size, sha256, storage_key, created_by)
              values (${fileId}, ${org}, ${device.id}, ${meta.filename}, ${meta.content_type}, ${stored.size}, ${stored.sha256}, ${stored.key}, ${caller.user_id})`);
          return insertResult(tx, emit, org, caller, { device_id: device.id, values: [], raw_file_id: fileId });
        }, answer);
        return answer(json);
      } catch (err) {
        await storage.remove(stored.key).catch(() => undefined);
        throw err;
      }
    },
  };
}
