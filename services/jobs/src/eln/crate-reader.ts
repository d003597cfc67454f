import yauzl from 'yauzl';
import { DomainError, jsonProblem } from '@lab/kit';
import { METADATA_FILE, typesOf, type Entity } from './crate.js';
import { ELN_LIMITS } from './limits.js';

/** The archive as read: its root folder, its files by path under that folder, and its metadata's graph. */
export interface ReadCrate {
  root: string;
  files: Map<string, Buffer>;
  graph: Map<string, Entity>;
}

/** Why an archive is refused: the job fails at once (no retry reads it differently) and writes nothing. */
export const refused = (code: string, message: string) => new DomainError('invalid', code, message);
const tooLarge = (message: string) => new DomainError('too_large', 'eln_too_large', message);

/** S_IFLNK in the Unix mode a ZIP keeps in the high half of an entry's external attributes. */
const isSymlink = (e: yauzl.Entry) => ((e.externalFileAttributes >>> 16) & 0o170000) === 0o120000;

function openZip(bytes: Buffer): Promise<yauzl.ZipFile> {
  return new Promise((resolve, reject) =>
    // names are checked by yauzl too (absolute, `..`): its message is kept in the reason
    yauzl.fromBuffer(bytes, { lazyEntries: true, validateEntrySizes: true, decodeStrings: true }, (err, zip) =>
      err ? reject(refused('eln_not_a_zip', `the file is not a ZIP archive: ${err.message}`)) : resolve(zip),
    ),
  );
}

/** An entry's bytes, at most `limit` of them whatever it declares. */
function readEntry(zip: yauzl.ZipFile, entry: yauzl.Entry, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(entry, (err, stream) => {
      if (err) {
        reject(refused('eln_corrupt_entry', `entry ${entry.fileName} cannot be read: ${err.message}`));
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      stream.on('data', (c: Buffer) => {
        size += c.length;
        if (size > limit) {
          stream.destroy();
          reject(tooLarge(`entry ${entry.fileName} inflates past ${limit} bytes`));
          return;
        }
        chunks.push(c);
      });
      // yauzl compares the inflated bytes with the declared size (validateEntrySizes): a lie is an error here
      stream.on('error', (e: Error) => reject(refused('eln_corrupt_entry', `entry ${entry.fileName}: ${e.message}`)));
      stream.on('end', () => resolve(Buffer.concat(chunks)));
    });
  });
}

/** Refuses a name that could land outside the root folder when unpacked, whatever yauzl let through. */
function checkName(name: string): void {
  if (name.includes('\0') || name.startsWith('/') || /^[A-Za-z]:/.test(name) || name.split('/').some((s) => s === '..')) {
    throw refused('eln_unsafe_entry', `entry ${JSON.stringify(name.slice(0, 200))} points outside the archive's root folder`);
  }
}

/**
 * Reads and checks a whole archive before anything is written: one root folder
 * holding ro-crate-metadata.json; no entry outside it, no symbolic link; at most
 * ELN_LIMITS.entries entries; sizes as declared and as inflated within the
 * limits, and no entry packed tighter than ELN_LIMITS.ratio past 1 MiB (a
 * compression bomb); the metadata valid JSON-LD with a @graph of entities.
 */
export async function readCrate(bytes: Buffer): Promise<ReadCrate> {
  if (bytes.length > ELN_LIMITS.crateBytes) throw tooLarge(`the archive has ${bytes.length} bytes; an import takes at most ${ELN_LIMITS.crateBytes}`);
  const zip = await openZip(bytes);
  try {
    if (zip.entryCount > ELN_LIMITS.entries) throw tooLarge(`the archive has ${zip.entryCount} entries; an import takes at most ${ELN_LIMITS.entries}`);
    const files = new Map<string, Buffer>();
    const roots = new Set<string>();
    let unpacked = 0;
    for (;;) {
      const entry = await nextEntry(zip);
      if (!entry) break;
      const name = entry.fileName;
      checkName(name);
      if (isSymlink(entry)) throw refused('eln_unsafe_entry', `entry ${name} is a symbolic link; an archive's entries are files and folders`);
      roots.add(name.slice(0, name.indexOf('/') === -1 ? name.length : name.indexOf('/')));
      if (!name.includes('/')) throw refused('eln_no_root_folder', `entry ${name} is not inside a root folder; an .eln archive holds one folder at its root`);
      if (name.endsWith('/')) continue;
      const declared = entry.uncompressedSize;
      unpacked += declared;
      if (declared > ELN_LIMITS.entryBytes) throw tooLarge(`entry ${name} declares ${declared} bytes; an entry may hold at most ${ELN_LIMITS.entryBytes}`);
      if (unpacked > ELN_LIMITS.unpackedBytes) throw tooLarge(`the archive unpacks to more than ${ELN_LIMITS.unpackedBytes} bytes`);
      if (declared > 1024 * 1024 && declared / Math.max(1, entry.compressedSize) > ELN_LIMITS.ratio) {
        throw tooLarge(
          `entry ${name} is packed ${Math.round(declared / Math.max(1, entry.compressedSize))} to 1, past ${ELN_LIMITS.ratio} to 1 (a compression bomb)`,
        );
      }
      files.set(name, await readEntry(zip, entry, declared));
    }
    if (roots.size !== 1) throw refused('eln_no_root_folder', `the archive has ${roots.size} folders at its root; an .eln archive has exactly one`);
    const [root] = [...roots] as [string];
    const inside = new Map<string, Buffer>();
    for (const [name, b] of files) inside.set(name.slice(root.length + 1), b);
    const metadata = inside.get(METADATA_FILE);
    if (!metadata) throw refused('eln_no_metadata', `the root folder ${root} holds no ${METADATA_FILE}`);
    if (metadata.length > ELN_LIMITS.metadataBytes) throw tooLarge(`${METADATA_FILE} has more than ${ELN_LIMITS.metadataBytes} bytes`);
    return { root, files: inside, graph: graphOf(metadata) };
  } finally {
    zip.close();
  }
}

function nextEntry(zip: yauzl.ZipFile): Promise<yauzl.Entry | undefined> {
  return new Promise((resolve, reject) => {
    const cleanup = () => {
      zip.removeAllListeners('entry');
      zip.removeAllListeners('end');
      zip.removeAllListeners('error');
    };
    zip.once('entry', (e: yauzl.Entry) => {
      cleanup();
      resolve(e);
    });
    zip.once('end', () => {
      cleanup();
      resolve(undefined);
    });
    zip.once('error', (err: Error) => {
      cleanup();
      // yauzl's name checks: "invalid relative path: ../x", "absolute path: /x"
      const unsafe = /relative path|absolute path|invalid characters/.test(err.message);
      reject(
        unsafe
          ? refused('eln_unsafe_entry', `an entry points outside the archive's root folder (${err.message})`)
          : refused('eln_not_a_zip', `the ZIP archive is damaged: ${err.message}`),
      );
    });
    zip.readEntry();
  });
}

/** RO-Crate metadata is flat (entities referring to each other by @id): a few levels, never hundreds. */
const MAX_METADATA_DEPTH = 64;

const malformed = (why: string) => refused('eln_malformed_metadata', `${METADATA_FILE} is not valid RO-Crate JSON-LD: ${why}`);

/** The @graph's entities by @id; the descriptor and the root dataset it is about must be there. */
function graphOf(bytes: Buffer): Map<string, Entity> {
  let doc: unknown;
  try {
    doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (err) {
    throw malformed(err instanceof Error ? err.message : 'not JSON');
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw malformed('the document is not a JSON object');
  // what is read from it is walked recursively later: a deep document stops here
  if (jsonProblem(doc, MAX_METADATA_DEPTH)?.kind === 'too_deep') throw malformed(`it nests deeper than ${MAX_METADATA_DEPTH} levels`);
  const list = (doc as Record<string, unknown>)['@graph'];
  if (!Array.isArray(list)) throw malformed('it has no @graph list');
  if (list.length > ELN_LIMITS.entities) throw tooLarge(`the @graph has ${list.length} entities; an import takes at most ${ELN_LIMITS.entities}`);
  const graph = new Map<string, Entity>();
  for (const [i, e] of list.entries()) {
    if (!e || typeof e !== 'object' || Array.isArray(e) || typeof (e as Entity)['@id'] !== 'string')
      throw malformed(`@graph[${i}] is not an entity with an @id`);
    graph.set((e as Entity)['@id'], e as Entity);
  }
  const descriptor = graph.get(METADATA_FILE) ?? graph.get(`./${METADATA_FILE}`);
  if (!descriptor) throw malformed(`no metadata descriptor (an entity with @id ${METADATA_FILE})`);
  const about = descriptor.about as Entity | undefined;
  const rootId = typeof about?.['@id'] === 'string' ? about['@id'] : './';
  const root = graph.get(rootId);
  if (!root || !typesOf(root).includes('Dataset')) throw malformed(`the descriptor is about ${rootId}, which is not a Dataset of the graph`);
  if (rootId !== './') graph.set('./', root);
  return graph;
}
