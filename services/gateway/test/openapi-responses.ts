/**
 * Every answer an end-to-end test receives through the gateway, checked against
 * the OpenAPI document the gateway serves: the operation of the method and
 * path, a documented status (an exact one or its range; `default` only for a
 * 5xx), a documented content type, and the body against that status's schema
 * (ajv, JSON Schema 2020-12, with formats). A mismatch throws, so the test that
 * made the call fails: the document is what generated clients trust.
 */
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import type { ValidateFunction } from 'ajv';
import { openApiDocument, ROUTES } from '@lab/http-api';

type Json = Record<string, any>;

interface Checked {
  method: string;
  path: string;
  status: number;
  contentType: string | null;
  text: string;
  /** the Location header as answered; checked when given and the answer documents one */
  location?: string | null;
}

const escapePointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/** The validators of one document, compiled per operation, status and media type when first needed. */
export class ResponseChecker {
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ValidateFunction>();
  private readonly templates: { template: string; pattern: RegExp; literals: number }[];

  constructor(private readonly doc: Json) {
    // strict off: the document carries OpenAPI keywords (discriminator, x-...) ajv does not know
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
    addFormats(this.ajv);
    this.ajv.addSchema(doc, 'openapi');
    this.templates = Object.keys(doc.paths ?? {}).map((template) => ({
      template,
      pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`),
      literals: template.split('/').filter((s) => s && !s.startsWith('{')).length,
    }));
  }

  /** The document's path template for a request path (literal segments win), if any. */
  templateOf(path: string): string | undefined {
    const found = this.templates.filter((t) => t.pattern.test(path)).sort((a, b) => b.literals - a.literals);
    return found[0]?.template;
  }

  /** The mismatches of one answer (empty when it is what the document says). */
  problems(a: Checked): string[] {
    const template = this.templateOf(a.path);
    // a path the document does not have: the gateway's 404/405 in the error envelope
    if (!template) return a.status >= 400 ? this.envelope(a) : [`${a.method} ${a.path}: ${a.status} on a path the document does not list`];
    const op = this.doc.paths[template][a.method.toLowerCase()];
    if (!op)
      return a.status === 405 || a.status === 404 ? this.envelope(a) : [`${a.method} ${template}: no such operation in the document (answered ${a.status})`];
    const responses = op.responses as Json;
    const key = [String(a.status), `${String(a.status)[0]}XX`, ...(a.status >= 500 ? ['default'] : [])].find((k) => responses[k] !== undefined);
    if (!key)
      return [`${a.method} ${template}: status ${a.status} is not documented (documented: ${Object.keys(responses).join(', ')}); body ${a.text.slice(0, 300)}`];
    const response = this.resolve(responses[key]);
    const headers = (response.headers ?? {}) as Json;
    if (a.location === null && headers.Location && a.status < 300)
      return [`${a.method} ${template} ${a.status}: no Location header where the document has one`];
    const content = response.content as Json | undefined;
    if (!content) return a.text.length ? [`${a.method} ${template} ${a.status}: a body where the document has none: ${a.text.slice(0, 200)}`] : [];
    const media = (a.contentType ?? '').split(';')[0]!.trim().toLowerCase();
    const documented = Object.keys(content).find((m) => m === media || (m.endsWith('/*') && media.startsWith(m.slice(0, -1))) || m === '*/*');
    if (!documented) return [`${a.method} ${template} ${a.status}: content type ${media || '(none)'} is not documented (${Object.keys(content).join(', ')})`];
    if (!/json/.test(documented) || !content[documented].schema) return [];
    let body: unknown;
    try {
      body = JSON.parse(a.text);
    } catch {
      return [`${a.method} ${template} ${a.status}: not JSON: ${a.text.slice(0, 200)}`];
    }
    const pointer = `openapi#/paths/${escapePointer(template)}/${a.method.toLowerCase()}/responses/${key}/content/${escapePointer(documented)}/schema`;
    const validate = this.validator(pointer, responses[key]);
    if (validate(body)) return [];
    const errors = (validate.errors ?? []).slice(0, 8).map((e) => `${e.instancePath || '/'} ${e.message}${e.params ? ` ${JSON.stringify(e.params)}` : ''}`);
    return [`${a.method} ${template} ${a.status}: body does not match the document: ${errors.join('; ')}; body ${a.text.slice(0, 400)}`];
  }

  /** Throws when the answer is not what the document says. */
  check(a: Checked): void {
    const found = this.problems(a);
    if (found.length) throw new Error(`answer not as documented in the OpenAPI document:\n${found.join('\n')}`);
  }

  private envelope(a: Checked): string[] {
    if (!a.text) return [];
    const v = this.validator('openapi#/components/schemas/Error');
    try {
      return v(JSON.parse(a.text)) ? [] : [`${a.method} ${a.path} ${a.status}: not the error envelope: ${a.text.slice(0, 200)}`];
    } catch {
      return [`${a.method} ${a.path} ${a.status}: not JSON: ${a.text.slice(0, 200)}`];
    }
  }

  private resolve(x: Json): Json {
    let cur = x;
    for (let i = 0; i < 5 && typeof cur?.$ref === 'string'; i++) {
      cur = cur.$ref
        .replace(/^#\//, '')
        .split('/')
        .reduce((n: Json, p) => n?.[p.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
    }
    return cur;
  }

  private validator(pointer: string, response?: Json): ValidateFunction {
    let v = this.compiled.get(pointer);
    if (!v) {
      // a response given by $ref: point into components instead
      const target = response && typeof response.$ref === 'string' ? pointer.replace(/#\/paths\/.*\/responses\/[^/]+/, `#${response.$ref.slice(1)}`) : pointer;
      v = this.ajv.compile({ $ref: target });
      this.compiled.set(pointer, v);
    }
    return v;
  }
}

let checker: ResponseChecker | undefined;

/**
 * The checker of the document the gateways under test serve. It is built in
 * process from the same route table and schemas (GET /v1/openapi.json answers
 * the same document), not fetched: a fetch would be a request of its own in the
 * counts that tests of metrics and rate limits read.
 */
export function checkerFor(_base: string): ResponseChecker {
  checker ??= new ResponseChecker(openApiDocument(ROUTES));
  return checker;
}
