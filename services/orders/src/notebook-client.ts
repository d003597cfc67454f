import { recordObject, records, recordsWire } from '@lab/contracts';
import { DomainError, RpcClient, type CallerContext } from '@lab/kit';

export type RecordClient = RpcClient<typeof records.RecordServiceService>;

/**
 * The notebook's record service, which owns samples. The address is resolved
 * on first use, not at start: in one process (standalone, test stacks) the
 * notebook may start after this service has registered. No address means the
 * order cannot be taken (503), not a crash at start.
 */
export class NotebookSamples {
  private client?: RecordClient;

  constructor(
    private readonly address: () => string | undefined,
    private readonly secret: string,
  ) {}

  private get(): RecordClient {
    if (this.client) return this.client;
    const address = this.address();
    if (!address) throw DomainError.unavailable('the notebook service is not configured (NOTEBOOK_ADDR)');
    this.client = new RpcClient(recordsWire.Client, address, { secret: this.secret });
    return this.client;
  }

  /**
   * Creates one sample as the caller: the notebook checks the caller's
   * permissions, owns and audits the sample and emits sample.created.
   */
  async create(caller: CallerContext, body: Record<string, unknown>): Promise<{ id: string }> {
    const r = await this.get().call('createRecord', { resource: 'samples', body, parent_id: '' }, caller);
    return recordObject(r.record!) as { id: string };
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
