/** Largest raw result file (spec: 25 MiB), and the larger allowance of mzML files (50 MiB). */
export const RAW_FILE_MAX_BYTES = 25 * 1024 * 1024;
export const MZML_MAX_BYTES = 50 * 1024 * 1024;

/** mzML by extension (.mzML in any case) or by its media type: a claim, checked against the content. */
export function isMzml(filename: string, contentType: string): boolean {
  return /\.mzml$/i.test(filename) || contentType.split(';')[0]!.trim().toLowerCase() === 'application/mzml+xml';
}

/** The most a file of this name and type may hold; what it gets depends on its content (RawFileAllowance). */
export const rawFileLimit = (filename: string, contentType: string): number => (isMzml(filename, contentType) ? MZML_MAX_BYTES : RAW_FILE_MAX_BYTES);

/** Bytes of a file's head looked at for its XML root element. */
const HEAD_BYTES = 4096;

/**
 * Whether a file's first bytes are an mzML document: after an optional BOM, the
 * XML declaration, comments, processing instructions and a DOCTYPE, the root
 * element is `mzML` or `indexedmzML` (with or without a namespace prefix).
 */
export function hasMzmlRoot(head: Buffer): boolean {
  let text = head.toString('utf8').replace(/^\uFEFF/, '');
  for (;;) {
    text = text.trimStart();
    const skip = /^(<\?[\s\S]*?\?>|<!--[\s\S]*?-->|<!DOCTYPE[^>]*>)/i.exec(text);
    if (!skip) break;
    text = text.slice(skip[0].length);
  }
  return /^<(?:[A-Za-z_][\w.-]*:)?(?:indexedmzML|mzML)[\s/>]/.test(text);
}

/**
 * The size rule of one raw file, applied by the gateway and the service alike as
 * the bytes stream past: 25 MiB, or 50 MiB for a file that claims to be mzML (name
 * or type) and whose content starts as one. A name alone does not earn the larger
 * allowance: it is granted once the head shows the mzML root element.
 */
export class RawFileAllowance {
  private head: Buffer[] = [];
  private headBytes = 0;
  private decided: number | undefined;

  constructor(filename: string, contentType: string) {
    if (!isMzml(filename, contentType)) this.decided = RAW_FILE_MAX_BYTES;
  }

  /** The limit once `chunk` (the next bytes of the file) is seen. */
  limitAfter(chunk: Buffer): number {
    if (this.decided !== undefined) return this.decided;
    this.head.push(chunk.subarray(0, HEAD_BYTES - this.headBytes));
    this.headBytes += Math.min(chunk.length, HEAD_BYTES - this.headBytes);
    if (this.headBytes < HEAD_BYTES) return MZML_MAX_BYTES; // too little seen; far below either limit
    return this.decide();
  }

  private decide(): number {
    this.decided = hasMzmlRoot(Buffer.concat(this.head)) ? MZML_MAX_BYTES : RAW_FILE_MAX_BYTES;
    this.head = [];
    return this.decided;
  }
}
