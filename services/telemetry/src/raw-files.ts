import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { telemetry } from '@lab/contracts';
import { DomainError, newId, parseWith, rows, type CallerContext, type FileStore, type ServiceDeps } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import { deviceScope } from './access.js';
import { createdAnswer, idOf, orgOf, text, uuid, where } from './common.js';
import { RawFileAllowance } from './raw-file-limits.js';
import { deviceById, insertResult } from './results.js';

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
export function rawFileHandlers(deps: ServiceDeps, files: FileStore) {
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
      const stored = await files.put(newId(), bytes());
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
        await files.remove([stored.key]).catch(() => undefined);
        throw err;
      }
    },
  };
}

/** Bytes per message of a raw file read: gRPC's messages stay small, whatever the store's chunks. */
const READ_MESSAGE_BYTES = 64 * 1024;

/**
 * ReadRawFile: the bytes of a raw file of the caller's organisation (one of a
 * device the caller may act for), streamed from the store as the client reads
 * them; the first message carries its name, type, size and SHA-256. A server
 * stream, so registered apart from the unary handlers.
 */
export function rawFileReader(deps: ServiceDeps, files: FileStore) {
  return {
    readRawFile: async function* (req: telemetry.IdRequest, caller: CallerContext): AsyncGenerator<telemetry.RawFileChunk> {
      const org = orgOf(caller);
      assertMay(caller, 'read');
      const [f] = await rows<{ filename: string; content_type: string; size: string; sha256: string; storage_key: string }>(
        deps.db.orm,
        sql`select f.filename, f.content_type, f.size::text, f.sha256, f.storage_key from telemetry.raw_files f
            left join telemetry.devices d on d.org_id = f.org_id and d.id = f.device_id
            where ${where([sql`f.org_id = ${org}`, sql`f.id = ${idOf(req.id, 'raw file')}`, deviceScope(caller)])}`,
      );
      if (!f) throw DomainError.notFound('raw file not found');
      const opened = await files.open(f.storage_key);
      if (!opened) throw DomainError.notFound('the raw file is no longer stored', 'raw_file_not_found');
      const head = { content_type: f.content_type, size: Number(f.size), filename: f.filename, sha256: f.sha256 };
      let first = true;
      try {
        for await (const chunk of opened.stream as AsyncIterable<Buffer>) {
          for (let at = 0; at < chunk.length; at += READ_MESSAGE_BYTES) {
            const data = chunk.subarray(at, at + READ_MESSAGE_BYTES);
            yield first ? { data, ...head } : { data };
            first = false;
          }
        }
      } finally {
        // a client gone mid-read stops the fetching of further chunks
        opened.stream.destroy();
      }
      if (first) yield { data: Buffer.alloc(0), ...head };
    },
  };
}
