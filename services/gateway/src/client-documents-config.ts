import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { ClientDocumentOptions } from '@lab/functions';
import { envFlag } from '@lab/kit';

/**
 * How the identity provider fetches MCP clients' metadata documents, from the
 * environment of the gateway and of the standalone process alike. Both settings
 * are for tests and local clients only: production documents live on public
 * https hosts with certificates the system trusts.
 */
export const clientDocumentsEnv = {
  /** documents may be fetched from loopback and private addresses (the SSRF guard of webhook deliveries lets them through) */
  LAB_MCP_CLIENT_DOCUMENTS_ALLOW_PRIVATE_NETWORKS: envFlag,
  /** a PEM file of one more CA to trust for documents, on top of the system's (a test server's self-signed certificate) */
  LAB_MCP_CLIENT_DOCUMENTS_CA_FILE: z.string().min(1).optional(),
};

export function clientDocumentsOptions(cfg: {
  LAB_MCP_CLIENT_DOCUMENTS_ALLOW_PRIVATE_NETWORKS: boolean;
  LAB_MCP_CLIENT_DOCUMENTS_CA_FILE?: string;
}): ClientDocumentOptions {
  return {
    allowPrivateNetworks: cfg.LAB_MCP_CLIENT_DOCUMENTS_ALLOW_PRIVATE_NETWORKS,
    ...(cfg.LAB_MCP_CLIENT_DOCUMENTS_CA_FILE ? { ca: readFileSync(cfg.LAB_MCP_CLIENT_DOCUMENTS_CA_FILE, 'utf8') } : {}),
  };
}
