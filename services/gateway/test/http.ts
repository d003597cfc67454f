/**
 * Small fetch helpers for the gateway's end-to-end tests. Every answer is
 * checked against the OpenAPI document the gateway serves (openapi-responses.ts):
 * an answer the document does not describe fails the test that made the call.
 */
import { waitFor } from '@lab/testing/waits';
import { checkerFor } from './openapi-responses';

export interface Answer<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface CallOptions {
  token?: string;
  /** a value sent as JSON; a string or bytes are sent as they are */
  body?: unknown;
  headers?: Record<string, string>;
}

export async function call<T = any>(base: string, method: string, path: string, opts: CallOptions = {}): Promise<Answer<T>> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Uint8Array | undefined;
  if (opts.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = typeof opts.body === 'string' || opts.body instanceof Uint8Array ? opts.body : JSON.stringify(opts.body);
  }
  const res = await fetch(`${base}${path}`, { method, headers, body });
  const text = await res.text();
  checkerFor(base).check({
    method,
    path: new URL(`${base}${path}`).pathname,
    status: res.status,
    contentType: res.headers.get('content-type'),
    text,
    location: res.headers.get('location'),
  });
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

/** Polls until check() returns a value other than undefined, or fails after the timeout naming `what`. */
export const eventually = <T>(check: () => Promise<T | undefined>, timeoutMs = 10_000, what = 'the awaited condition'): Promise<T> =>
  waitFor(what, check, { timeoutMs, intervalMs: 50 });
