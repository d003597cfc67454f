/**
 * What an .eln import takes (docs/eln.md, decision 057). The crate travels in the
 * job's input as base64 inside the 1 MB JSON body of POST /v1/jobs, so the
 * archive itself is small; what it unpacks to is bounded separately, since a
 * ZIP says how large its entries are and a hostile one lies.
 */
export const ELN_LIMITS = {
  /** the archive's bytes (base64 of it fits the gateway's 1 MB JSON body with room for the envelope) */
  crateBytes: 720 * 1024,
  /** ZIP entries, folders included */
  entries: 10_000,
  /** all entries unpacked, as declared and as actually inflated */
  unpackedBytes: 64 * 1024 * 1024,
  /** one entry unpacked */
  entryBytes: 32 * 1024 * 1024,
  /** ro-crate-metadata.json unpacked */
  metadataBytes: 8 * 1024 * 1024,
  /** unpacked / packed of one entry, past 1 MiB unpacked: deflate of real data stays far below this */
  ratio: 200,
  /** entities in the @graph */
  entities: 50_000,
  /** experiments and samples created by one import */
  records: 2_000,
  /** a file's bytes kept inline (base64) in the imported experiment's content; larger files keep name, size and hash */
  inlineFileBytes: 64 * 1024,
} as const;

/** The base64 text of a crate of ELN_LIMITS.crateBytes. */
export const CRATE_BASE64_CHARS = Math.ceil(ELN_LIMITS.crateBytes / 3) * 4;

/** Experiments one export takes by id. */
export const ELN_EXPORT_MAX_IDS = 500;
