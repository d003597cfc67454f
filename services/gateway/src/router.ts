import type { HttpMethod, Route } from '@lab/http-api';

export type RouteMatch =
  { kind: 'found'; route: Route; params: Record<string, string> } | { kind: 'method_not_allowed'; allowed: (HttpMethod | 'HEAD')[] } | { kind: 'not_found' };

/** HEAD is a GET without the body (RFC 9110 9.3.2; uptime checks and link checkers send it). */
const answersHead = (route: Route) => route.method === 'GET';

interface Compiled {
  route: Route;
  segments: string[];
  literals: number;
}

const isParam = (segment: string) => segment.startsWith(':');

/**
 * Matches method and path against a table; literal segments beat parameters.
 * Routes are indexed by segment count and second segment (the resource under
 * /v1/, /admin/v1/, ...), so a request compares a handful of candidates, and a
 * params object is built only for a candidate that wins: on every request the
 * scan over the whole table used to build one for each route of the same length.
 */
export class Router {
  /** `${segments}/${second segment}` -> the routes that can match, in table order */
  private readonly byKey = new Map<string, Compiled[]>();
  /** segment count -> routes whose second segment is a parameter (or that have fewer than two) */
  private readonly open = new Map<number, Compiled[]>();

  constructor(routes: Route[]) {
    const compiled = routes.map((route) => {
      const segments = split(route.path);
      return { route, segments, literals: segments.filter((x) => !isParam(x)).length };
    });
    const bySize = new Map<number, Compiled[]>();
    for (const c of compiled) {
      const sized = bySize.get(c.segments.length) ?? [];
      sized.push(c);
      bySize.set(c.segments.length, sized);
    }
    const isOpen = (c: Compiled) => c.segments[1] === undefined || isParam(c.segments[1]);
    // each list keeps table order, so ties go to the earlier route as they always did
    for (const [n, sized] of bySize) {
      this.open.set(n, sized.filter(isOpen));
      for (const second of new Set(sized.filter((c) => !isOpen(c)).map((c) => c.segments[1]!))) {
        this.byKey.set(
          `${n}/${second}`,
          sized.filter((c) => isOpen(c) || c.segments[1] === second),
        );
      }
    }
  }

  match(method: string, path: string): RouteMatch {
    const parts = split(path);
    const candidates = (parts.length >= 2 ? this.byKey.get(`${parts.length}/${parts[1]}`) : undefined) ?? this.open.get(parts.length) ?? [];
    let best: Compiled | undefined;
    let bestParams: Record<string, string> | undefined;
    for (const c of candidates) {
      const serves = c.route.method === method || (method === 'HEAD' && answersHead(c.route));
      if (!serves || (best && c.literals <= best.literals) || !literalsMatch(c.segments, parts)) continue;
      const params = decodeParams(c.segments, parts);
      if (!params) continue;
      best = c;
      bestParams = params;
    }
    // A more specific template of another method is the document's path for this
    // one: GET /v1/results/upload is a 405 naming POST, not a GET of /v1/results/{id}.
    const shadowed = best !== undefined && candidates.some((c) => c.literals > best.literals && literalsMatch(c.segments, parts));
    if (best && !shadowed) return { kind: 'found', route: best.route, params: bestParams! };
    // Only a miss pays for the other methods' list: those of the most specific
    // templates the path matches (the document's path for it), so Allow on
    // /v1/results/upload names its POST, not also the GET of /v1/results/{id}.
    const matching = candidates.filter((c) => literalsMatch(c.segments, parts) && decodeParams(c.segments, parts));
    const most = Math.max(...matching.map((c) => c.literals));
    const allowed = new Set<HttpMethod | 'HEAD'>(
      matching.filter((c) => c.literals === most).flatMap((c) => (answersHead(c.route) ? [c.route.method, 'HEAD' as const] : [c.route.method])),
    );
    if (allowed.size) return { kind: 'method_not_allowed', allowed: [...allowed] };
    return { kind: 'not_found' };
  }
}

const split = (path: string) => path.split('/').filter((s) => s.length > 0);

/** Whether the literal segments of a pattern equal the path's (the lengths are equal). */
function literalsMatch(pattern: string[], parts: string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!;
    if (!isParam(p) && p !== parts[i]) return false;
  }
  return true;
}

/** The decoded parameters, or null when one is not valid percent-encoding (no match). */
function decodeParams(pattern: string[], parts: string[]): Record<string, string> | null {
  const params: Record<string, string> = {};
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!;
    if (!isParam(p)) continue;
    try {
      params[p.slice(1)] = decodeURIComponent(parts[i]!);
    } catch {
      return null;
    }
  }
  return params;
}
