import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { telemetry } from '@lab/contracts';
import { DomainError, newId, parseWith, type CallerContext, type ServiceDeps } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import { createdAnswer, orgOf, text, uuid } from './common.js';
import { RawFileAllowance } from './raw-file-limits.js';
import { deviceById, insertResult } from './results.js';
import type { FileStorage } from './storage.js';

const metaSchema = z.object({
  // empty: the device is named by the last message, after the file
  device_id: z.union([z.literal(''), uuid]),
  filename: text(255).refine((s) => !s.includes('\0'), 'must not contain NUL'),
  content_type: z
    .string()
    .trim()
    .max(255)
    .transform((s) => s || 'application/octet-stream'),
});

const deviceIdAfterFile = z.object({ device_id: uuid });

const tooLarge = (limit: number) => new DomainError('too_large', 'payload_too_large', `the file exceeds ${limit / (1024 * 1024)} MiB`, { limit_bytes: limit });

/**
 * POST /v1/results/upload behind the gateway: the first message names the device
 * and the file, the others carry its bytes. The bytes stream into storage (hashed
 * and counted on the way, never held whole); then a raw_files row and a result
 * linked to it commit together. A failed commit removes the stored file.
 *
 * A client may send the multipart parts in either order. When the device_id part
 * comes after the file, the gateway cannot name the device up front: the first
 * message then names none, the last one does, and the device is checked once the
 * file is stored (an unknown device removes it again).
 */
export function rawFileHandlers(deps: ServiceDeps, storage: FileStorage) {
  return {
    uploadRawFile: async (input: AsyncIterable<telemetry.UploadChunk>, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      assertMay(caller, 'write');
      const messages = input[Symbol.asyncIterator]();
      const first = await messages.next();
      if (first.done || !first.value.meta) throw DomainError.invalid('the first message must carry the upload metadata');
      const meta = parseWith(metaSchema, first.value.meta);
      const allowance = new RawFileAllowance(meta.filename, meta.content_type);
      // the device is checked before a byte is stored, when it is known before the file
      const named = meta.device_id ? await deviceById(deps.db.orm, org, caller, meta.device_id) : undefined;
      let trailer: string | undefined;

      async function* bytes(): AsyncGenerator<Buffer> {
        let size = 0;
        let next: IteratorResult<telemetry.UploadChunk> = first;
        while (!next.done) {
          if (trailer !== undefined) throw DomainError.invalid('the message naming the device must be the last');
          const data = next.value.data;
          size += data.length;
          const limit = allowance.limitAfter(data);
          if (size > limit) throw tooLarge(limit);
          if (data.length) yield data;
          if (next.value.device_id !== undefined) {
            if (named) throw DomainError.invalid('the device is named twice');
            trailer = next.value.device_id;
          }
          next = await messages.next();
        }
      }
      const stored = await storage.put(bytes());
      try {
        const device = named ?? (await deviceById(deps.db.orm, org, caller, parseWith(deviceIdAfterFile, { device_id: trailer ?? '' }).device_id));
        const result = await deps.outbox.write(
          caller,
          async (tx, emit) => {
            // the upload took its time: the device is held from here to the commit
            await deviceById(tx, org, caller, device.id, true);
            const fileId = newId();
            await tx.execute(sql`insert into telemetry.raw_files (id, org_id, device_id, filename, content_type, size, sha256, storage_key, created_by)
              values (${fileId}, ${org}, ${device.id}, ${meta.filename}, ${meta.content_type}, ${stored.size}, ${stored.sha256}, ${stored.key}, ${caller.user_id})`);
            return insertResult(tx, emit, org, caller, { device_id: device.id, values: [], raw_file_id: fileId });
          },
          createdAnswer,
        );
        return createdAnswer(result);
      } catch (err) {
        await storage.remove(stored.key).catch(() => undefined);
        throw err;
      }
    },
  };
}
