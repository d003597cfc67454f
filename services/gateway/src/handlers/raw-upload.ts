import busboy from 'busboy';
import type { Readable } from 'node:stream';
import { MZML_MAX_BYTES, rawFileLimit } from '@lab/telemetry';
import { DomainError } from '@lab/kit';
import type { Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';

/** Size of the messages the file is forwarded in. */
const CHUNK_BYTES = 256 * 1024;
/** What a multipart body may hold beside the file: boundaries, part headers, device_id. */
const ENVELOPE_BYTES = 64 * 1024;
/** A large file over a slow link may take a while; the service stops reading at the cap anyway. */
const UPLOAD_DEADLINE_MS = 15 * 60_000;

const tooLarge = (limit: number) =>
  new DomainError('too_large', 'payload_too_large', `the file exceeds ${limit / (1024 * 1024)} MiB`, { limit_bytes: limit });
const invalid = (path: string, message: string) => DomainError.invalid(message, { field: path, fields: [{ path, message }] });

/**
 * POST /v1/results/upload: parts `device_id` (first) and `file`. The file is
 * never held whole: busboy hands it over in pieces, which go on to the telemetry
 * service as ~256 KiB messages of one client-streaming call, paced by its
 * backpressure. Past the size limit (25 MiB, 50 MiB for mzML) the call is
 * cancelled and the rest of the body is read and dropped, then 413 is answered;
 * a declared Content-Length already over the limit is refused before forwarding.
 */
export function uploadRawFile(ctx: Ctx, deps: Deps): Promise<Reply> {
  const { req } = ctx;
  if (!/^multipart\/form-data\s*;/i.test(req.headers['content-type'] ?? '')) {
    return Promise.reject(invalid('', 'the body must be multipart/form-data with parts device_id and file'));
  }
  const declared = Number(req.headers['content-length'] ?? Number.NaN);
  const caller = callerIn(ctx);
  const client = deps.clients.telemetry();

  return new Promise<Reply>((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: req.headers,
        // busboy itself stops handing over file bytes past the largest limit
        limits: { fileSize: MZML_MAX_BYTES + 1, files: 1, fields: 4, fieldSize: 1024, parts: 6, headerPairs: 20 },
      });
    } catch {
      reject(invalid('', 'malformed multipart/form-data'));
      return;
    }
    let deviceId: string | undefined;
    let failure: DomainError | undefined;
    let upload: Promise<string> | undefined;

    bb.on('field', (name, value) => {
      if (name === 'device_id') deviceId = value.trim();
    });
    bb.on('file', (name, file, info) => {
      if (name !== 'file' || upload || failure) {
        file.resume();
        return;
      }
      if (!deviceId) {
        failure = invalid('device_id', 'the device_id part must come before the file part');
        file.resume();
        return;
      }
      const limit = rawFileLimit(info.filename ?? '', info.mimeType ?? '');
      if (declared > limit + ENVELOPE_BYTES) {
        failure = tooLarge(limit);
        file.resume();
        return;
      }
      upload = forward(file, limit, { device_id: deviceId, filename: info.filename ?? 'upload', content_type: info.mimeType ?? '' });
      upload.catch(() => undefined);
    });

    const forward = (file: Readable, limit: number, meta: { device_id: string; filename: string; content_type: string }) => {
      const { stream, response } = client.clientStream('uploadRawFile', caller, UPLOAD_DEADLINE_MS);
      stream.on('error', () => undefined);
      stream.write({ meta, data: Buffer.alloc(0) });
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      let size = 0;
      let stopped = false;
      const send = () => {
        if (!pendingBytes) return true;
        const data = Buffer.concat(pending, pendingBytes);
        pending = [];
        pendingBytes = 0;
        return stream.write({ data });
      };
      // once the call is over (answered, refused or cancelled), the rest of the file is only drained
      const stop = () => {
        stopped = true;
        pending = [];
        pendingBytes = 0;
        file.resume();
      };
      file.on('data', (chunk: Buffer) => {
        if (stopped) return;
        size += chunk.length;
        if (size > limit) {
          failure = tooLarge(limit);
          stop();
          stream.cancel();
          return;
        }
        pending.push(chunk);
        pendingBytes += chunk.length;
        if (pendingBytes >= CHUNK_BYTES && !send()) {
          file.pause();
          stream.once('drain', () => {
            if (!stopped) file.resume();
          });
        }
      });
      file.on('end', () => {
        if (stopped) return;
        send();
        stream.end();
      });
      return response.then(
        (r) => r.json,
        (err: unknown) => {
          stop();
          throw err;
        },
      );
    };

    bb.on('close', () => {
      if (failure) return reject(failure);
      if (!upload) return reject(invalid('file', 'the file part is missing'));
      upload.then((json) => resolve({ status: 201, body: `{"data":${json}}`, contentType: 'application/json; charset=utf-8' }), reject);
    });
    bb.on('error', () => {
      failure ??= invalid('', 'malformed multipart/form-data');
      reject(failure);
    });
    req.on('aborted', () => reject(invalid('', 'request aborted')));
    req.pipe(bb);
  });
}
