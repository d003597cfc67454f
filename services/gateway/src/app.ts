import express, { type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import {
  assertStorableJson,
  DomainError,
  isSaneRequestId,
  jsonFromBytes,
  mayHoldHugeNumber,
  MAX_JSON_DEPTH,
  metrics,
  nameHttpRoute,
  newId,
  requestScope,
  storableText,
  validationFailed,
} from '@lab/kit';
import { authenticate, runRoute } from './pipeline.js';
import { RateLimitedError, type RateState } from '@lab/rate-limits';
import { send } from './replies.js';
import { logClientError, logServerError } from './server-errors.js';
import type { Ctx, Deps } from './request.js';
import { errorReplyOn } from '@lab/functions';
import { ROUTES, type Route } from '@lab/http-api';
import { Router } from './router.js';

/** The spec's maximum size of an inbound webhook request body (description A). */
const INBOUND_WEBHOOK_MAX_BYTES = 1_000_000;

interface Locals {
  requestId: string;
  route?: Route;
  params?: Record<string, string>;
  /** the request once authenticated */
  ctx?: Ctx;
}

const locals = (res: Response) => res.locals as Locals;

/** The express application of the gateway: the route table is its only router. */
export function createApp(deps: Deps): express.Express {
  const router = new Router(ROUTES);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  app.use((req: Request, res: Response, next: NextFunction) => {
    const given = req.headers['x-request-id'];
    // an incoming X-Request-Id is kept only if it is short and plain
    const requestId = isSaneRequestId(given) ? given : newId();
    locals(res).requestId = requestId;
    res.setHeader('X-Request-Id', requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const route = locals(res).route?.path ?? 'unmatched';
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      metrics().httpDuration.observe({ method: req.method, route, status: String(res.statusCode) }, seconds);
      const finished = { requestId, method: req.method, route, status: res.statusCode };
      logServerError(deps.log, res, finished);
      logClientError(deps.log, res, finished);
    });
    requestScope.run({ request_id: requestId }, next);
  });
  app.use(helmet());

  // Routing before body parsing: an unknown path is 404 whatever its body.
  app.use((req: Request, res: Response, next: NextFunction) => {
    const m = router.match(req.method, req.path);
    if (m.kind === 'found') {
      locals(res).route = m.route;
      locals(res).params = m.params;
      nameHttpRoute(m.route.path);
      next();
      return;
    }
    if (m.kind === 'method_not_allowed') {
      res.setHeader('Allow', m.allowed.join(', '));
      next(new DomainError('method_not_allowed', 'method_not_allowed', `${req.method} is not allowed on ${req.path}`));
      return;
    }
    next(DomainError.notFound(`no route for ${req.method} ${req.path}`));
  });
  // Authentication before the body is read: a request without a valid token is 401
  // (or 429 over its limit) whatever its body holds, and an unknown caller cannot
  // make the gateway read and parse a megabyte.
  app.use((req: Request, res: Response, next: NextFunction) => {
    const { requestId, route, params } = locals(res);
    const ctx: Ctx = { req, route: route!, params: params ?? {}, requestId, body: undefined };
    locals(res).ctx = ctx;
    authenticate(ctx, deps).then(() => next(), next);
  });
  // The inbound webhook receiver verifies a signature over the exact bytes:
  // its body is read raw (any content type), at most 1,000,000 bytes (413
  // beyond, never buffered further); express.json then leaves it alone.
  const inboundRaw = express.raw({ limit: INBOUND_WEBHOOK_MAX_BYTES, type: () => true });
  app.use((req: Request, res: Response, next: NextFunction) => {
    // express's Request is the IncomingMessage node made, extended in place
    // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
    if (locals(res).route?.handler.kind === 'inbound_webhook') inboundRaw(req, res, next);
    else next();
  });
  // A JSON body is read as bytes (decompressed, at most 1 MB) and made a value by
  // kit's jsonFromBytes, the one JSON reader of every route (the inbound receiver's
  // too, after its signature): bytes that are not UTF-8 are refused, never decoded
  // with replacement characters. Any JSON value is taken, so a body that is not an
  // object is refused by the handler as validation_failed rather than here.
  const jsonRaw = express.raw({ limit: '1mb', type: ['application/json', 'application/*+json'] });
  app.use((req: Request, res: Response, next: NextFunction) => {
    if (locals(res).route?.handler.kind === 'inbound_webhook') {
      next();
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- as above: express's Request is node's IncomingMessage
    jsonRaw(req, res, (err?: unknown) => {
      if (err || !Buffer.isBuffer(req.body)) {
        next(err);
        return;
      }
      const bytes: Buffer = req.body;
      try {
        if (mayHideUnstorable(bytes)) (req as Request & Walk)[MUST_WALK] = true;
        // an empty body (chunked, no bytes) counts as none given, as it always has
        req.body = bytes.length === 0 ? {} : jsonFromBytes(bytes);
      } catch (parseErr) {
        next(parseErr);
        return;
      }
      next();
    });
  });
  // HTML forms and OAuth token requests: only the OAuth endpoints take them.
  const formBody = express.urlencoded({ extended: false, limit: '64kb', parameterLimit: 50 });
  app.use((req: Request, res: Response, next: NextFunction) => {
    const kind = locals(res).route?.handler.kind;
    // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- as above: express's Request is node's IncomingMessage
    if (kind === 'oauth_authorize' || kind === 'oauth_token' || kind === 'idp_oauth') formBody(req, res, next);
    else next();
  });

  app.use((req: Request, res: Response, next: NextFunction) => {
    const ctx = locals(res).ctx!;
    ctx.body = req.body;
    // Body parsing ran in stream callbacks: re-enter the request's scope.
    requestScope.run({ request_id: ctx.requestId }, () => {
      handle(ctx, deps, res).catch(next);
    });
  });

  // what failed before a handler ran: routing, authentication, the body
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    rateHeaders(res, err instanceof RateLimitedError ? err.state : locals(res).ctx?.rate);
    send(res, errorReplyOn(locals(res).route, bodyError(err) ?? err));
  });
  return app;
}

async function handle(ctx: Ctx, deps: Deps, res: Response): Promise<void> {
  let reply;
  try {
    checkRequest(ctx);
    reply = await runRoute(ctx, deps);
    rateHeaders(res, ctx.rate);
  } catch (err) {
    rateHeaders(res, err instanceof RateLimitedError ? err.state : ctx.rate);
    reply = errorReplyOn(ctx.route, err);
  }
  send(res, reply);
}

function rateHeaders(res: Response, rate: RateState | undefined): void {
  if (!rate) return;
  res.setHeader('X-RateLimit-Limit', String(rate.limit));
  res.setHeader('X-RateLimit-Remaining', String(rate.remaining));
}

/** What every route refuses: a body that is not JSON, and text PostgreSQL cannot store. */
function checkRequest(ctx: Ctx): void {
  // a raw file upload is multipart/form-data, streamed by its handler
  if (ctx.body === undefined && hasBody(ctx.req) && ctx.route.handler.kind !== 'raw_upload') {
    throw DomainError.invalid('request body must be JSON (Content-Type: application/json)', {
      fields: [{ path: '', message: 'must be application/json' }],
    });
  }
  if ((ctx.req as Request & Walk)[MUST_WALK]) assertStorableJson(ctx.body);
  assertStorableQuery(ctx.req.url);
}

/**
 * A query value is text too: a NUL (`%00`) would reach a statement as a parameter
 * PostgreSQL refuses. Refused here once for every route, naming the parameter.
 */
function assertStorableQuery(url: string): void {
  const at = url.indexOf('?');
  if (at === -1 || !url.includes('%00', at)) return;
  const bad = [...new URLSearchParams(url.slice(at + 1))]
    .filter(([name, value]) => !storableText(name) || !storableText(value))
    .map(([name]) => ({ path: name, message: `${name} must not contain NUL characters` }));
  if (bad.length) throw validationFailed(bad, `invalid query parameter ${bad[0]!.path}`);
}

const MUST_WALK = Symbol('must walk the JSON body');
type Walk = { [MUST_WALK]?: true };

/**
 * Whether a JSON body's bytes could hold what PostgreSQL cannot store or nest
 * too deep to walk safely: NUL and unpaired surrogates can only arrive as \u
 * escapes, an infinite number as a long exponent or digit run, and a nesting of
 * MAX_JSON_DEPTH needs as many brackets. Most bodies
 * have neither, and skip the walk.
 */
function mayHideUnstorable(buf: Buffer): boolean {
  if (buf.includes('\\u') || mayHoldHugeNumber(buf.toString('latin1'))) return true;
  let brackets = 0;
  for (const b of [0x5b, 0x7b]) {
    for (let i = buf.indexOf(b); i !== -1; i = buf.indexOf(b, i + 1)) if (++brackets >= MAX_JSON_DEPTH) return true;
  }
  return false;
}

const hasBody = (req: Request) => Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;

/**
 * body-parser's errors as DomainErrors: malformed JSON, too large, bad charset.
 * Some carry no type: a broken gzip or deflate body is zlib's own error with a
 * status of 400 set on it, and is a malformed body like any other.
 */
function bodyError(err: unknown): DomainError | undefined {
  const e = err as { type?: unknown; status?: unknown } | null;
  if (!e || typeof e !== 'object' || err instanceof DomainError) return undefined;
  switch (e.type) {
    case 'entity.parse.failed':
      return DomainError.invalid('request body is not valid JSON', undefined, 'invalid_json');
    case 'entity.too.large':
      return new DomainError('too_large', 'payload_too_large', 'request body exceeds 1 MB');
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return DomainError.invalid('unsupported body encoding', undefined, 'invalid_body');
    case 'request.aborted':
      return DomainError.invalid('request aborted', undefined, 'invalid_body');
    default:
      return typeof e.status === 'number' && e.status >= 400 && e.status < 500
        ? DomainError.invalid('malformed request body', undefined, 'invalid_body')
        : undefined;
  }
}
