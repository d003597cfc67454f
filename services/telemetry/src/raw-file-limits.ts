/** Largest raw result file (spec: 25 MiB), and the larger allowance of mzML files (50 MiB). */
export const RAW_FILE_MAX_BYTES = 25 * 1024 * 1024;
export const MZML_MAX_BYTES = 50 * 1024 * 1024;

/** mzML by extension (.mzML in any case) or by its media type. */
export function isMzml(filename: string, contentType: string): boolean {
  return /\.mzml$/i.test(filename) || contentType.split(';')[0]!.trim().toLowerCase() === 'application/mzml+xml';
}

/** The size limit of one raw file; the gateway and the service apply the same rule. */
export const rawFileLimit = (filename: string, contentType: string): number =>
  isMzml(filename, contentType) ? MZML_MAX_BYTES : RAW_FILE_MAX_BYTES;
