import { parse, protocol, type PGlite, type QueryOptions, type Results } from '@electric-sql/pglite';
import { StatementNames } from '../statement-names.js';

const { serialize } = protocol;

/**
 * PGlite's `query` with the statements a process sends repeatedly prepared:
 * named, so PostgreSQL parses them once and keeps their plans, as the pooled
 * connections to a server do (the same StatementNames rule). PGlite's own
 * `query` sends an unnamed statement every time: Parse and Describe, then Bind,
 * Describe, Execute and Sync, each a call into the engine of its own. Measured on
 * this project's keyed create (the sample INSERT with its RETURNING render): 750-930
 * us per statement that way, 200-275 us as a named statement whose Bind, Describe,
 * Execute and Sync go in one call.
 *
 * Built from PGlite's public pieces only (protocol.serialize, execProtocolStream,
 * parse.parseResults, its serializers and parsers) and run under its
 * `runExclusive` lock, so it takes turns with its `query` and `exec` in the order
 * called. A call is what PGlite's `query` makes of it: parameters serialised by
 * the type PostgreSQL gives them, rows parsed by the instance's parsers and the
 * call's options, errors with their fields (and the text, as PGlite adds it), the
 * files synced after a statement outside a transaction.
 */
export class PreparedQueries {
  private readonly names = new StatementNames();
  /** The parameter types of each statement prepared on the session, by name. */
  private readonly prepared = new Map<string, number[]>();

  constructor(private readonly lite: PGlite) {}

  query<T>(text: string, params: unknown[] = [], options?: QueryOptions): Promise<Results<T>> {
    // statements without parameters may hold several commands; a COPY's blob and
    // given parameter types are PGlite's own affair
    const name = params.length > 0 && !options?.blob && !options?.paramTypes ? this.names.nameFor(text) : undefined;
    if (name === undefined) return this.lite.query<T>(text, params, options);
    return this.lite.runExclusive(async () => {
      try {
        const types = this.prepared.get(name) ?? (await this.prepare(name, text));
        const messages = await this.lite.execProtocolStream(
          Buffer.concat([
            serialize.bind({ statement: name, values: params.map((v, i) => this.serialized(v, types[i], options)) }),
            serialize.describe({ type: 'P' }),
            serialize.execute({}),
            serialize.sync(),
          ]),
          { syncToFs: false },
        );
        if (!this.lite.isInTransaction()) await this.lite.syncToFs();
        return parse.parseResults(messages, this.lite.parsers, options)[0] as Results<T>;
      } catch (err) {
        throw Object.assign(err as Error, { query: text, params, queryOptions: options });
      }
    });
  }

  /** Parses the statement under its name; its parameter types. A statement that fails to parse is not kept. */
  private async prepare(name: string, text: string): Promise<number[]> {
    const messages = await this.lite.execProtocolStream(
      Buffer.concat([serialize.parse({ name, text }), serialize.describe({ type: 'S', name }), serialize.sync()]),
      {
        syncToFs: false,
      },
    );
    const types = parse.parseDescribeStatementResults(messages);
    this.prepared.set(name, types);
    return types;
  }

  /** A parameter as PGlite's `query` sends it: by the serializer of its type, else as text. */
  private serialized(value: unknown, type: number | undefined, options: QueryOptions | undefined): string | null {
    if (value === null || value === undefined) return null;
    const serializer = type === undefined ? undefined : (options?.serializers?.[type] ?? this.lite.serializers[type]);
    return serializer ? serializer(value) : (value as { toString(): string }).toString();
  }
}
