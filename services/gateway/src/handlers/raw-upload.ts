import busboy from 'busboy';
import type { Readable } from 'node:stream';
import { telemetryItemJson, type JsonText } from '@lab/contracts';
import { MZML_MAX_BYTES, RawFileAllowance, rawFileLimit } from '@lab/telemetry';
import { DomainError } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { itemFromJson, type Reply } from '@lab/http-api';

/**
 * Largest piece of the file per message. The generated encoder grows its buffer
 * by doubling, so exactly 64 KiB plus the field's tag and length would be encoded
 * in a 128 KiB buffer; a few bytes less keeps each message in 64 KiB.
 */
const CHUNK_BYTES = 64 * 1024 - 16;
/**
 * File bytes written to the call whose write has not completed yet (the transport
 * has not taken them). The call's own buffer is bounded in messages (16), not in
 * bytes, so the file is paused on this byte budget rather than on 'drain'.
 */
const IN_FLIGHT_BYTES = 256 * 1024;
/** What a multipart body may hold beside the file: boundaries, part headers, device_id. */
const ENVELOPE_BYTES = 64 * 1024;
/** A large file over a slow link may take a while; the service stops reading at the cap anyway. */
const UPLOAD_DEADLINE_MS = 15 * 60_000;

interface UploadMeta {
  device_id: string;
  filename: string;
  content_type: string;
}

/** The client-streaming call of telemetry's uploadRawFile, as the gateway's client opens it. */
interface UploadCall {
  stream: {
    write(message: { meta?: UploadMeta; data: Buffer; device_id?: string }, done?: () => void): unknown;
    end(): void;
    cancel(): void;
    on(event: 'error', listener: () => void): unknown;
  };
  response: Promise<{ item?: Parameters<typeof telemetryItemJson>[0] }>;
}

const tooLarge = (limit: number) => new DomainError('too_large', 'payload_too_large', `the file exceeds ${limit / (1024 * 1024)} MiB`, { limit_bytes: limit });
const invalid = (path: string, message: string) => DomainError.invalid(message, { field: path, fields: [{ path, message }] });

/**
 * POST /v1/results/upload: parts `device_id` and `file`, in either order. The file is
 * never held whole: busboy hands it over in pieces, which go on to the telemetry
 * service as messages of at most ~64 KiB of one client-streaming call; the file
 * is paused while more than IN_FLIGHT_BYTES are written to the call and not yet
 * taken by the transport. Past the size limit (25 MiB, 50 MiB for mzML) the call is
 * cancelled and the rest of the body is read and dropped, then 413 is answered;
 * a declared Content-Length already over the limit is refused before forwarding.
 * When the device_id part comes after the file, the file goes on naming no device
 * and the call's last message names it once the body has been read. The call
 * ends only after the whole body is read and found sound (one file part, one
 * device_id), so a refused body stores nothing.
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
    let upload: Promise<JsonText> | undefined;
    /** Ends the call to the telemetry service early (set once the file is being forwarded). */
    let cancelUpload: (() => void) | undefined;
    /** The device_id part once the whole body is read (undefined: missing, or the upload failed). */
    let bodyRead!: (deviceId: string | undefined) => void;
    const deviceAfterBody = new Promise<string | undefined>((resolve) => (bodyRead = resolve));

    bb.on('field', (name, value) => {
      if (name !== 'device_id') return;
      if (deviceId !== undefined && deviceId !== value.trim()) failure ??= invalid('device_id', 'the device_id part is given twice');
      deviceId ??= value.trim();
    });
    bb.on('file', (name, file, info) => {
      // A body that ends inside a file part makes busboy destroy the part's stream with
      // an error ("Unexpected end of form"); without a listener that error is uncaught
      // and ends the process. busboy reports the same error on bb, which answers 400.
      file.on('error', () => undefined);
      if (name !== 'file') {
        failure ??= invalid(name, `unknown file part ${JSON.stringify(name).slice(0, 80)}: the file goes in the part named file`);
        cancelUpload?.();
      }
      if (upload || failure) {
        file.resume();
        return;
      }
      const meta = { device_id: deviceId ?? '', filename: info.filename ?? 'upload', content_type: info.mimeType };
      // the most the name and type could earn: the content decides on the way (RawFileAllowance)
      const most = rawFileLimit(meta.filename, meta.content_type);
      if (declared > most + ENVELOPE_BYTES) {
        failure = tooLarge(most);
        file.resume();
        return;
      }
      const forwarding = new FileForwarding(
        file,
        new RawFileAllowance(meta.filename, meta.content_type),
        meta,
        client.clientStream('uploadRawFile', caller, UPLOAD_DEADLINE_MS),
        {
          deviceAfterBody,
          tooLarge: (limit) => (failure = tooLarge(limit)),
        },
      );
      cancelUpload = () => forwarding.cancel();
      upload = forwarding.response;
      upload.catch(() => undefined);
    });

    // a second file part would otherwise be dropped unseen (limits.files)
    bb.on('filesLimit', () => {
      failure ??= invalid('file', 'one file per upload: the body has more than one file part');
      cancelUpload?.();
    });

    bb.on('close', () => {
      if (!failure && upload && deviceId === undefined) failure = invalid('device_id', 'the device_id part is missing');
      bodyRead(failure ? undefined : deviceId);
      if (failure) {
        reject(failure);
        return;
      }
      if (!upload) {
        reject(invalid('file', 'the file part is missing'));
        return;
      }
      upload.then((json) => resolve(itemFromJson(201, json)), reject);
    });
    bb.on('error', () => {
      failure ??= invalid('', 'malformed multipart/form-data');
      bodyRead(undefined);
      reject(failure);
    });
    // A client gone before its body was read: the call is cancelled (else the service
    // waits for the rest, its temporary file open, until the 15-minute deadline) and
    // busboy, which would wait for bytes that never come, is destroyed.
    req.on('close', () => {
      if (req.complete) return;
      cancelUpload?.();
      bb.destroy();
      bodyRead(undefined);
      reject(invalid('', 'request aborted'));
    });
    req.pipe(bb);
  });
}

/**
 * One file part forwarded to the telemetry service as one client-streaming call:
 * busboy's pieces go on in messages of at most CHUNK_BYTES, the file is paused while
 * more than IN_FLIGHT_BYTES are written and not yet taken by the transport, the
 * size is checked against what the content earns (RawFileAllowance), and the call
 * ends only once the whole body is read and names its device.
 */
class FileForwarding {
  /** The stored item as the API's JSON, or why the service refused it. */
  readonly response: Promise<JsonText>;
  private size = 0;
  private inFlight = 0;
  private paused = false;
  /** The call is over (answered, refused or cancelled): the rest of the file is only drained. */
  private stopped = false;

  constructor(
    private readonly file: Readable,
    private readonly allowance: RawFileAllowance,
    private readonly meta: UploadMeta,
    private readonly call: UploadCall,
    private readonly body: { deviceAfterBody: Promise<string | undefined>; tooLarge: (limit: number) => void },
  ) {
    call.stream.on('error', () => undefined);
    call.stream.write({ meta, data: Buffer.alloc(0) });
    file.on('error', () => this.cancel());
    file.on('data', (chunk: Buffer) => this.forward(chunk));
    file.on('end', () => this.endAfterBody());
    this.response = call.response.then(
      (r) => telemetryItemJson(r.item),
      (err: unknown) => {
        this.stop();
        throw err;
      },
    );
  }

  /**
   * The file will not complete (too large, truncated body, client gone, no device):
   * the service must not keep the call, and its temporary file, open until the deadline.
   */
  cancel(): void {
    if (this.stopped) return;
    this.stop();
    this.call.stream.cancel();
  }

  private stop(): void {
    this.stopped = true;
    this.file.resume();
  }

  private forward(chunk: Buffer): void {
    if (this.stopped) return;
    this.size += chunk.length;
    const limit = this.allowance.limitAfter(chunk);
    if (this.size > limit) {
      this.body.tooLarge(limit);
      this.cancel();
      return;
    }
    // busboy's pieces (slices of the body as it was read) go on as they are: joining
    // them would copy every byte once more, and the serializer copies them anyway
    for (let at = 0; at < chunk.length; at += CHUNK_BYTES) {
      const data = chunk.subarray(at, at + CHUNK_BYTES);
      this.inFlight += data.length;
      this.call.stream.write({ data }, () => this.written(data.length));
    }
    if (this.inFlight >= IN_FLIGHT_BYTES) {
      this.paused = true;
      this.file.pause();
    }
  }

  private written(bytes: number): void {
    this.inFlight -= bytes;
    if (this.paused && this.inFlight < IN_FLIGHT_BYTES) {
      this.paused = false;
      if (!this.stopped) this.file.resume();
    }
  }

  /**
   * The call ends once the whole body is read, never before: a part after the file
   * (a second file, a second device_id) can still make the upload a 400, which must
   * leave nothing stored. When the device_id part follows the file, the last
   * message names it.
   */
  private endAfterBody(): void {
    if (this.stopped) return;
    void this.body.deviceAfterBody.then((id) => {
      if (this.stopped) return;
      if (id === undefined) {
        this.cancel();
        return;
      }
      if (!this.meta.device_id) this.call.stream.write({ data: Buffer.alloc(0), device_id: id });
      this.call.stream.end();
    });
  }
}
