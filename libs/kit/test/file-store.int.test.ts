import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { DirectoryFileStore, FILE_CHUNK_BYTES, newId, openDatabase, PgFileStore, rechunk, type Database, type FileStore } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * The file stores of libs/kit against real PostgreSQL (and PGlite, and a
 * directory, for the contract they share): files stream in and out in chunks,
 * become readable only when complete, and leave nothing behind when removed or
 * when their write fails.
 */
const MiB = 1024 * 1024;
const CHUNK = FILE_CHUNK_BYTES;

/** The stored-file tables as a service's migration creates them, in the schema `schema`. */
async function createTables(db: Database, schema: string): Promise<void> {
  const ddl = await readFile(join(__dirname, '..', '..', '..', 'services', 'jobs', 'migrations', '007_stored_files.sql'), 'utf8');
  await db.rawTx(async (raw) => {
    await raw.exec(`create schema if not exists ${schema}`);
    await raw.exec(ddl.replaceAll('jobs.', `${schema}.`));
  });
}

/** `size` deterministic bytes (a counter hashed), given in pieces of `piece` bytes, never held whole. */
async function* bytes(size: number, piece = 64 * 1024, seed = 'x'): AsyncGenerator<Buffer> {
  for (let at = 0, n = 0; at < size; n++) {
    const len = Math.min(piece, size - at);
    const out = Buffer.allocUnsafe(len);
    for (let o = 0; o < len; o += 32) createHash('sha256').update(`${seed}:${n}:${o}`).digest().copy(out, o);
    at += len;
    yield out;
  }
}

async function sha256Of(source: AsyncIterable<Buffer | Uint8Array>): Promise<{ size: number; sha256: string; chunks: number[] }> {
  const h = createHash('sha256');
  let size = 0;
  const chunks: number[] = [];
  for await (const b of source) {
    h.update(b);
    size += b.length;
    chunks.push(b.length);
  }
  return { size, sha256: h.digest('hex'), chunks };
}

async function readAll(store: FileStore, key: string): Promise<Buffer | undefined> {
  const f = await store.open(key);
  if (!f) return undefined;
  const parts: Buffer[] = [];
  for await (const b of f.stream) parts.push(b as Buffer);
  return Buffer.concat(parts);
}

/** The contract every store keeps, whatever it keeps the bytes in. */
function contract(name: string, make: () => Promise<{ store: FileStore; close: () => Promise<void> }>) {
  describe(name, () => {
    let store: FileStore;
    let close: () => Promise<void>;
    beforeAll(async () => ({ store, close } = await make()));
    afterAll(() => close());

    it.each([
      ['an empty file', 0],
      ['one byte', 1],
      ['exactly one chunk', CHUNK],
      ['one byte over a chunk', CHUNK + 1],
      ['exactly two chunks', 2 * CHUNK],
    ])('keeps %s byte for byte', async (_what, size) => {
      const key = `org/${newId()}.bin`;
      const expected = await sha256Of(bytes(size, 100_000));
      const stored = await store.put(key, bytes(size, 100_000));
      expect(stored).toEqual({ key, size, sha256: expected.sha256 });
      const f = await store.open(key);
      expect(f?.size).toBe(size);
      const read = await sha256Of(f!.stream);
      expect([read.size, read.sha256]).toEqual([size, expected.sha256]);
    });

    it('answers undefined for a key it does not hold, and refuses a key that leaves its place', async () => {
      expect(await store.open(`org/${newId()}.pdf`)).toBeUndefined();
      await expect(store.put('../escape', bytes(1))).rejects.toThrow(/bad file key/);
      await expect(store.open('/etc/passwd')).rejects.toThrow(/bad file key/);
    });

    it('keeps nothing readable of a write whose stream fails', async () => {
      const key = `org/${newId()}.bin`;
      async function* failing() {
        yield* bytes(CHUNK * 2 + 10);
        throw new Error('client went away');
      }
      await expect(store.put(key, failing())).rejects.toThrow('client went away');
      expect(await store.open(key)).toBeUndefined();
    });

    it('replaces the file of a key written again, and removes it', async () => {
      const key = `org/${newId()}.pdf`;
      await store.put(key, bytes(CHUNK + 5, 4096, 'first'));
      const second = await store.put(key, bytes(300, 4096, 'second'));
      expect((await readAll(store, key))?.equals(Buffer.concat(await Array.fromAsync(bytes(300, 4096, 'second'))))).toBe(true);
      expect(second.size).toBe(300);
      await store.remove([key, `org/${newId()}.missing`]);
      expect(await store.open(key)).toBeUndefined();
    });
  });
}

describe('rechunk', () => {
  it('regroups pieces into chunks of exactly the size, the last one shorter, none for nothing', async () => {
    const sizes = async (pieces: number[], size: number) =>
      (
        await Array.fromAsync(
          rechunk(
            (async function* () {
              for (const p of pieces) yield Buffer.alloc(p, 1);
            })(),
            size,
          ),
        )
      ).map((b) => b.length);
    expect(await sizes([], 4)).toEqual([]);
    expect(await sizes([0, 0], 4)).toEqual([]);
    expect(await sizes([1, 2, 1], 4)).toEqual([4]);
    expect(await sizes([3, 3, 3], 4)).toEqual([4, 4, 1]);
    expect(await sizes([10], 4)).toEqual([4, 4, 2]);
  });
});

contract('a directory', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'lab-file-store-'));
  return { store: new DirectoryFileStore(dir), close: () => rm(dir, { recursive: true, force: true }) };
});

contract('PGlite', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'lab-file-store-pglite-'));
  const db = await openDatabase({ dataDir: dir });
  await createTables(db, 'files_lite');
  return {
    store: new PgFileStore(db, 'files_lite'),
    close: async () => {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describeWithServers(['postgres'], 'files in PostgreSQL', () => {
  let db: Database;
  let store: PgFileStore;
  const schema = 'files_pg';
  const count = async (q: ReturnType<typeof sql>) => Number((await db.rows<{ n: string }>(q))[0]!.n);
  const chunksOf = (key: string) =>
    count(sql`select count(*) as n from files_pg.stored_file_chunks c join files_pg.stored_files f on f.id = c.file_id where f.key = ${key}`);

  beforeAll(async () => {
    db = await openDatabase({ url: (await freshDatabaseUrl())!, poolSize: 3, name: 'file-store-test' });
    await createTables(db, schema);
    store = new PgFileStore(db, schema);
  });
  afterAll(async () => {
    await db.close();
    await dropFreshDatabases();
  });

  contract('PostgreSQL', async () => ({ store, close: async () => undefined }));

  it('streams 50 MiB in and out a chunk at a time, never the whole file', async () => {
    const key = `org/${newId()}.mzML`;
    const size = 50 * MiB;
    const expected = await sha256Of(bytes(size));
    // While the source is read, the chunks before it are already rows: the write
    // holds at most the chunk it is filling (and the piece that fills it).
    let given = 0;
    let mostAhead = 0;
    async function* watched() {
      for await (const piece of bytes(size)) {
        if (given % (8 * MiB) === 0 && given > 0) {
          const stored = await count(
            sql`select coalesce(sum(length(c.data)), 0) as n from files_pg.stored_file_chunks c join files_pg.stored_files f on f.id = c.file_id where f.key = ${key} and not f.complete`,
          );
          mostAhead = Math.max(mostAhead, given - stored);
        }
        given += piece.length;
        yield piece;
      }
    }
    const stored = await store.put(key, watched());
    expect(stored).toEqual({ key, size, sha256: expected.sha256 });
    expect(mostAhead).toBeLessThanOrEqual(CHUNK);
    expect(await chunksOf(key)).toBe(size / CHUNK);

    const f = await store.open(key);
    const read = await sha256Of(f!.stream);
    expect([read.size, read.sha256]).toEqual([size, expected.sha256]);
    // it came as a stream of pieces, none larger than a chunk (each chunk read in slices)
    expect(read.chunks.length).toBeGreaterThanOrEqual(size / CHUNK);
    expect(Math.max(...read.chunks)).toBeLessThanOrEqual(CHUNK);
  });

  it('reads chunk by chunk: chunks removed after the first was read fail the read instead of passing a short file', async () => {
    const key = `org/${newId()}.bin`;
    await store.put(key, bytes(4 * CHUNK));
    const f = await store.open(key);
    const it = f!.stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    expect((await it.next()).value.length).toBeGreaterThan(0);
    // the rest is not in this process yet: gone from the database, it cannot be read
    await db.orm.execute(sql`delete from files_pg.stored_file_chunks c using files_pg.stored_files f where f.id = c.file_id and f.key = ${key} and c.seq >= 2`);
    await expect(
      (async () => {
        for (let r = await it.next(); !r.done; r = await it.next());
      })(),
    ).rejects.toThrow(/removed while it was read/);
  });

  it('leaves no row of a failed write, and removal deletes every chunk', async () => {
    const failedKey = `org/${newId()}.bin`;
    async function* failing() {
      yield* bytes(3 * CHUNK);
      throw new Error('aborted');
    }
    await expect(store.put(failedKey, failing())).rejects.toThrow('aborted');
    expect(await count(sql`select count(*) as n from files_pg.stored_files where key = ${failedKey}`)).toBe(0);
    expect(await chunksOf(failedKey)).toBe(0);

    const key = `org/${newId()}.bin`;
    await store.put(key, bytes(3 * CHUNK + 7));
    expect(await chunksOf(key)).toBe(4);
    const before = await count(sql`select count(*) as n from files_pg.stored_file_chunks`);
    await store.remove([key]);
    expect(await count(sql`select count(*) as n from files_pg.stored_files where key = ${key}`)).toBe(0);
    expect(await count(sql`select count(*) as n from files_pg.stored_file_chunks`)).toBe(before - 4);
  });

  it('sweeps the incomplete files of writers that died, not the writes under way', async () => {
    const dead = newId();
    const live = newId();
    await db.orm.execute(sql`insert into files_pg.stored_files (id, key, complete, size, sha256, created_at)
      values (${dead}, 'org/dead.bin', false, 0, '', now() - interval '2 days'), (${live}, 'org/live.bin', false, 0, '', now())`);
    await db.orm.execute(sql`insert into files_pg.stored_file_chunks (file_id, seq, data) values (${dead}, 0, '\\x00'::bytea), (${live}, 0, '\\x00'::bytea)`);
    expect(await store.sweep(24)).toBe(1);
    expect(await count(sql`select count(*) as n from files_pg.stored_file_chunks where file_id = ${dead}`)).toBe(0);
    expect(await count(sql`select count(*) as n from files_pg.stored_files where id = ${live}`)).toBe(1);
  });

  it('reads a file written to its directory before the switch to PostgreSQL', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'lab-file-store-before-'));
    try {
      const before = new DirectoryFileStore(dir);
      const key = `org/${newId()}.pdf`;
      await before.put(key, bytes(1000));
      const withBefore = new PgFileStore(db, schema, CHUNK, before);
      expect((await readAll(withBefore, key))?.length).toBe(1000);
      await withBefore.remove([key]);
      expect(await before.open(key)).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
