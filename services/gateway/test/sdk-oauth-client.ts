import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { browserAuthorize, type FlowUser } from './oauth-flow';

/**
 * The official SDK's MCP client as Claude Desktop or an IDE runs it, with an
 * in-memory OAuthClientProvider whose "browser" signs `user` in over HTTP and
 * picks `orgId` at consent. With `clientMetadataUrl` it names itself by that
 * client ID metadata document where the server supports them, else it registers.
 */
export class TestProvider implements OAuthClientProvider {
  info?: OAuthClientInformationMixed;
  saved?: OAuthTokens;
  verifier?: string;
  authorizationUrl?: URL;
  code?: string;
  consentHtml = '';
  registrations = 0;

  constructor(
    private readonly user: FlowUser,
    private readonly orgId: string,
    private readonly redirect: string,
    readonly clientMetadataUrl?: string,
  ) {}

  get redirectUrl(): string {
    return this.redirect;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'SDK e2e client',
      redirect_uris: [this.redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  state(): string {
    return 'opaque-state';
  }
  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.info;
  }
  saveClientInformation(info: OAuthClientInformationMixed): void {
    // a URL client id is saved too, but nothing was registered for it
    if (!this.info && info.client_id !== this.clientMetadataUrl) this.registrations++;
    this.info = info;
  }
  tokens(): OAuthTokens | undefined {
    return this.saved;
  }
  saveTokens(t: OAuthTokens): void {
    this.saved = t;
  }
  saveCodeVerifier(v: string): void {
    this.verifier = v;
  }
  codeVerifier(): string {
    return this.verifier!;
  }
  /** The browser part: sign in and consent, then keep the code the redirect carries. */
  async redirectToAuthorization(url: URL): Promise<void> {
    this.authorizationUrl = url;
    const done = await browserAuthorize(url, this.user, this.orgId, (page) => {
      this.consentHtml = page.html;
    });
    if (done.status !== 302 || !done.location) throw new Error(`authorization ended with ${done.status}: ${done.html.slice(0, 300)}`);
    const back = new URL(done.location);
    expect(`${back.origin}${back.pathname}`).toBe(this.redirect);
    expect(back.searchParams.get('state')).toBe('opaque-state');
    this.code = back.searchParams.get('code') ?? undefined;
  }
}

/** Connects as a stock client does: a 401 starts authorization, the code is exchanged, then it connects again. */
export async function signedInClient(mcpUrl: URL, provider: TestProvider): Promise<Client> {
  const first = new Client({ name: 'e2e', version: '1.0.0' });
  await expect(first.connect(new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider }))).rejects.toBeInstanceOf(UnauthorizedError);
  await new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider }).finishAuth(provider.code!);
  const client = new Client({ name: 'e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider }));
  return client;
}
