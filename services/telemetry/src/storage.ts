import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { newId } from '@lab/kit';

export interface Stored {
  key: string;
  size: number;
  sha256: string;
}

/** Where raw result files live; one small interface so another store can replace the directory. */
export interface FileStorage {
  /** Streams the bytes in, hashing and counting as they pass; nothing is kept if the stream fails. */
  put(data: AsyncIterable<Buffer>): Promise<Stored>;
  get(key: string): Readable;
  remove(key: string): Promise<void>;
}

/**
 * Files in a directory: written to a temporary name and renamed once complete,
 * so a reader never sees half a file and a failed upload leaves nothing behind.
 */
export class DirectoryStorage implements FileStorage {
  constructor(private readonly dir: string) {}

  async put(data: AsyncIterable<Buffer>): Promise<Stored> {
    await mkdir(join(this.dir, 'tmp'), { recursive: true });
    const key = newId();
    const tmp = join(this.dir, 'tmp', `${key}.part`);
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
      await rename(tmp, this.path(key));
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return { key, size, sha256: hash.digest('hex') };
  }

  get(key: string): Readable {
    return createReadStream(this.path(key));
  }

  async remove(key: string): Promise<void> {
    await rm(this.path(key), { force: true });
  }

  private path(key: string): string {
    if (!/^[0-9a-f-]{36}$/.test(key)) throw new Error(`bad storage key ${key}`);
    return join(this.dir, key);
  }
}
