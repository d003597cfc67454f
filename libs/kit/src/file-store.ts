import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { sql } from 'drizzle-orm';
import { rows, type Database, type Tx } from './db.js';

/** What a store kept: its size and SHA-256, counted as the bytes passed. */
export interface StoredFile {
  key: string;
  size: number;
  sha256: string;
}

/** A stored file opened for reading: its size, and its bytes as a stream of chunks in order. */
export interface OpenedFile {
  size: number;
  stream: Readable;
}

/**
 * Where a service keeps files (raw instrument files, job artifacts): the bytes
 * streamed in and out, never held whole. A key is a relative path (`a/b.pdf`, a
 * UUID) chosen by the caller; what it means is the caller's business.
 */
export interface FileStore {
  readonly kind: FileStoreKind;
  /**
   * Streams the bytes in under `key`, hashing and counting them on the way. The
   * file becomes readable only once it is complete, replacing any file of that
   * key; if the stream fails, nothing of it is kept.
   */
  put(key: string, data: AsyncIterable<Buffer | Uint8Array>): Promise<StoredFile>;
  /** The complete file of `key`, or undefined when there is none. */
  open(key: string): Promise<OpenedFile | undefined>;
  /**
   * Removes the files of these keys (those that exist); removing a missing file is
   * no error. Given a transaction of the service's database, a database store
   * removes them in it (with the rows that named them); on the embedded database
   * a store must be given the open transaction, whose one connection it holds.
   */
  remove(keys: readonly string[], tx?: Tx): Promise<void>;
  /** Deletes what writes whose process died left (never readable), begun over `olderThanHours` ago; returns how many. */
  sweep(olderThanHours?: number): Promise<number>;
}

/** Bytes of the pieces a stored chunk is read in (see PgFileStore.open). */
const READ_SLICE_BYTES = 60 * 1024;

/** Writes under way are younger than this: an upload's or an export's whole write, with a margin. */
const SWEEP_HOURS = 24;

export type FileStoreKind = 'postgres' | 'filesystem';

/** Bytes of one stored chunk: within 256 KiB-1 MiB, large enough for few rows and round trips, small enough to hold one at a time. */
export const FILE_CHUNK_BYTES = 512 * 1024;

/**
 * A stream's pieces regrouped into pieces of exactly `size` bytes (the last one
 * shorter, none for an empty stream). Holds at most one piece: the bytes are
 * copied into it as they come, so a source of many small pieces (gRPC messages,
 * a socket's reads) becomes few large rows, and a large piece is cut.
 */
export async function* rechunk(source: AsyncIterable<Buffer | Uint8Array>, size: number): AsyncGenerator<Buffer> {
  let piece = Buffer.allocUnsafe(size);
  let filled = 0;
  for await (const data of source) {
    let at = 0;
    while (at < data.length) {
      const n = Math.min(size - filled, data.length - at);
      piece.set(data.subarray(at, at + n), filled);
      filled += n;
      at += n;
      if (filled === size) {
        yield piece;
        // a new buffer: the one yielded may still be in use by the consumer (a statement being sent)
        piece = Buffer.allocUnsafe(size);
        filled = 0;
      }
    }
  }
  if (filled) yield piece.subarray(0, filled);
}

/** A key as a relative path below a root: no absolute path, no `..`, no empty segment. */
function checkedKey(key: string): string {
  if (!key || key.length > 512 || isAbsolute(key) || key.includes('\0') || key.split('/').some((s) => s === '' || s === '.' || s === '..'))
    throw new Error(`bad file key ${JSON.stringify(key)}`);
  return key;
}

/**
 * Files in PostgreSQL, in two tables of the service's schema:
 *
 *   <schema>.stored_files (id uuid primary key, key text, complete boolean, size bigint, sha256 text, created_at timestamptz)
 *   <schema>.stored_file_chunks (file_id uuid references stored_files on delete cascade, seq int, data bytea, primary key (file_id, seq))
 *
 * (the service's migration creates them). A write inserts the file's row
 * (incomplete), then each chunk of FILE_CHUNK_BYTES in its own statement, then in
 * one transaction removes the complete file of the same key and marks this one
 * complete: no transaction stays open while a client sends its bytes (on the
 * embedded database, whose one connection every service shares, it would hold
 * up all of them), and a reader sees the old file or the new one, never a part.
 * A failed write deletes its row (the chunks go with it); one whose process died
 * is left incomplete, unreadable, and swept by `sweepIncomplete`. A read fetches
 * one chunk per statement as the stream is read: one chunk in memory at a time.
 */
export class PgFileStore implements FileStore {
  readonly kind = 'postgres';
  private readonly files;
  private readonly chunks;

  constructor(
    private readonly db: Database,
    schema: string,
    private readonly chunkBytes = FILE_CHUNK_BYTES,
    /** where files written before a switch to PostgreSQL are read from, when a key is not in the database */
    private readonly before?: FileStore,
  ) {
    if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
    this.files = sql.raw(`${schema}.stored_files`);
    this.chunks = sql.raw(`${schema}.stored_file_chunks`);
  }

  async put(key: string, data: AsyncIterable<Buffer | Uint8Array>): Promise<StoredFile> {
    checkedKey(key);
    const id = randomUUID();
    await this.db.orm.execute(sql`insert into ${this.files} (id, key, complete, size, sha256) values (${id}, ${key}, false, 0, '')`);
    try {
      const hash = createHash('sha256');
      let size = 0;
      let seq = 0;
      for await (const chunk of rechunk(data, this.chunkBytes)) {
        hash.update(chunk);
        size += chunk.length;
        await this.db.orm.execute(sql`insert into ${this.chunks} (file_id, seq, data) values (${id}, ${seq++}, ${chunk})`);
      }
      const sha256 = hash.digest('hex');
      await this.db.tx(async (tx) => {
        // the key's earlier file (a job's artifact written again) goes as this one takes its place
        await tx.execute(sql`delete from ${this.files} where key = ${key} and complete`);
        await tx.execute(sql`update ${this.files} set complete = true, size = ${size}, sha256 = ${sha256} where id = ${id}`);
      });
      return { key, size, sha256 };
    } catch (err) {
      await this.db.orm.execute(sql`delete from ${this.files} where id = ${id}`).catch(() => undefined);
      throw err;
    }
  }

  async open(key: string): Promise<OpenedFile | undefined> {
    const [file] = await rows<{ id: string; size: string | number }>(
      this.db.orm,
      sql`select id::text, size from ${this.files} where key = ${checkedKey(key)} and complete`,
    );
    if (!file) return this.before?.open(key);
    const size = Number(file.size);
    // One chunk per statement, as rows of READ_SLICE_BYTES (the chunks are stored
    // uncompressed, so PostgreSQL reads only the slice's part of each): pg gives a
    // bytea as hex text, and a slice's text stays small enough for V8's young
    // generation, where it dies cheaply, while a whole chunk's (1 MiB) would be a
    // large object kept until a full collection (+36-42 MiB of RSS per 50 MiB read).
    const next = (seq: number) =>
      rows<{ data: Uint8Array }>(
        this.db.orm,
        sql`select substring(c.data from s for ${READ_SLICE_BYTES}) as data
            from ${this.chunks} c, generate_series(1, length(c.data), ${READ_SLICE_BYTES}) s
            where c.file_id = ${file.id} and c.seq = ${seq} order by s`,
      );
    async function* chunks(): AsyncGenerator<Buffer> {
      let read = 0;
      for (let seq = 0; read < size; seq++) {
        const slices = await next(seq);
        // removed while being read (retention, a delete): a short file must not pass for the whole one
        if (!slices.length) throw new Error(`stored file ${key} was removed while it was read (${read} of ${size} bytes)`);
        for (const { data } of slices) {
          read += data.length;
          // pg gives a Buffer, PGlite a Uint8Array: the same bytes, without a copy
          yield Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        }
      }
    }
    // one chunk fetched ahead of the reader at most (Readable.from would otherwise buffer 16)
    return { size, stream: Readable.from(chunks(), { highWaterMark: 1 }) };
  }

  /** Whether the database (not the directory of before) holds a complete file of `key`. */
  async holds(key: string): Promise<boolean> {
    return (await rows(this.db.orm, sql`select 1 from ${this.files} where key = ${checkedKey(key)} and complete`)).length > 0;
  }

  async remove(keys: readonly string[], tx?: Tx): Promise<void> {
    if (!keys.length) return;
    // the chunks go with their file (on delete cascade)
    await (tx ?? this.db.orm).execute(sql`delete from ${this.files} where key = any(${sql.param(keys.map(checkedKey))}::text[])`);
    await this.before?.remove(keys);
  }

  /** Deletes the incomplete files begun more than `olderThanHours` ago: writes whose process died before they completed or cleaned up. */
  async sweep(olderThanHours = SWEEP_HOURS): Promise<number> {
    const gone = await rows<{ id: string }>(
      this.db.orm,
      sql`delete from ${this.files} where not complete and created_at < now() - (${olderThanHours} * interval '1 hour') returning id`,
    );
    return gone.length;
  }
}

/**
 * Files in a directory, one file per key (a key's `/` makes subdirectories): each
 * written to a temporary name beside its place and renamed once complete, so a
 * reader never sees half a file and a failed write leaves nothing behind.
 */
export class DirectoryFileStore implements FileStore {
  readonly kind = 'filesystem';
  readonly root: string;

  constructor(dir: string) {
    this.root = resolve(dir);
  }

  /** The file of a key: below the root, never outside it. */
  path(key: string): string {
    const full = resolve(this.root, checkedKey(key));
    if (!full.startsWith(this.root + sep)) throw new Error(`file key ${key} escapes the store's directory`);
    return full;
  }

  async put(key: string, data: AsyncIterable<Buffer | Uint8Array>): Promise<StoredFile> {
    const file = this.path(key);
    await mkdir(dirname(file), { recursive: true });
    const tmp = `${file}.${randomUUID()}.part`;
    const hash = createHash('sha256');
    let size = 0;
    async function* counted() {
      for await (const chunk of data) {
        hash.update(chunk);
        size += chunk.length;
        yield chunk;
      }
    }
    try {
      await pipeline(counted, createWriteStream(tmp, { flags: 'wx' }));
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return { key, size, sha256: hash.digest('hex') };
  }

  async open(key: string): Promise<OpenedFile | undefined> {
    // opened before anything is read: the file removed a moment later (retention)
    // cannot turn a read under way into a failure half-way
    const handle = await open(this.path(key), 'r').catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    });
    if (!handle) return undefined;
    try {
      const { size } = await handle.stat();
      // the stream closes the handle when it ends or is destroyed
      return { size, stream: handle.createReadStream() };
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  async remove(keys: readonly string[]): Promise<void> {
    for (const key of keys) await rm(this.path(key), { force: true });
  }

  /** Deletes the temporary files (`.part`) of writes whose process died. */
  async sweep(olderThanHours = SWEEP_HOURS): Promise<number> {
    const names = await readdir(this.root, { recursive: true }).catch(() => [] as string[]);
    let removed = 0;
    for (const name of names.filter((n) => n.endsWith('.part'))) {
      const file = join(this.root, name);
      const s = await stat(file).catch(() => undefined);
      if (s && Date.now() - s.mtimeMs > olderThanHours * 3_600_000) {
        await rm(file, { force: true });
        removed++;
      }
    }
    return removed;
  }
}

export interface FileStoreSettings {
  /** the service's variable (TELEMETRY_FILE_STORE, JOBS_ARTIFACT_STORE); unset: PostgreSQL on a server, the directory embedded */
  kind?: FileStoreKind;
  /** the filesystem store's directory; with PostgreSQL, where files written before the switch are still read from */
  dir: string;
}

/**
 * A service's file store: its files in its own schema, or in a directory. On a
 * PostgreSQL server (DATABASE_URL, the cluster shape) the schema is the default:
 * every replica reads what any of them wrote, with no shared volume. On the
 * embedded database the directory is: PGlite took 22 s and 230 MiB more RSS for
 * a 50 MiB upload, a directory half a second and none (decision 048). In
 * PostgreSQL a key not found there is looked for in the directory, so files
 * written there before a switch stay readable (and removable) until moved.
 */
export function openFileStore(db: Database, schema: string, settings: FileStoreSettings): FileStore {
  const dir = new DirectoryFileStore(settings.dir);
  const kind = settings.kind ?? (db.kind === 'pg' ? 'postgres' : 'filesystem');
  return kind === 'filesystem' ? dir : new PgFileStore(db, schema, FILE_CHUNK_BYTES, dir);
}
