import { principalIn, type Ctx, type Deps } from '../request.js';
import { openApiDocument, RECORD_RESOURCES, ROUTES, json, type Reply } from '@lab/http-api';

export const health = async (): Promise<Reply> => json(200, { status: 'ok' });

let openApi: Reply | undefined;
/** The document is derived from the static route table, so it is built once. */
export const openapi = async (): Promise<Reply> => (openApi ??= json(200, openApiDocument(ROUTES)));

/** Who the token is and which generic resources this deployment serves to its organisation. */
export async function ping(ctx: Ctx, deps: Deps): Promise<Reply> {
  const p = principalIn(ctx);
  const resources = RECORD_RESOURCES.filter((r) => deps.clients.has(r.service) && (!r.module || p.modules.includes(r.module))).map((r) => r.resource);
  const base = `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}`;
  return json(200, {
    ok: true,
    authenticated_as: { kind: p.token_kind, user_id: p.user_id ?? null, org_id: p.org_id },
    resources,
    docs: `${base}/v1/openapi.json`,
  });
}
