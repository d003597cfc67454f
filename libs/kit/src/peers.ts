import type { ChannelCredentials, Client } from '@grpc/grpc-js';
import { DomainError } from './errors.js';
import { RpcClient } from './grpc.js';

type ClientCtor = new (address: string, credentials: ChannelCredentials, options?: object) => Client;
type Definition = { [method: string]: { path: string; requestStream: boolean; responseStream: boolean } };

/**
 * A client of another service whose address is found when it is first needed:
 * the given address, else the address book (a service's `deps.peers`, which is
 * `<NAME>_ADDR` in the cluster), else `<NAME>_ADDR`. Resolving late lets a
 * launcher that starts services one after another (standalone, test stacks)
 * publish each address as it becomes known; a service that is still missing
 * answers 503 service_unavailable for the calls that need it, not a crash.
 */
export class PeerClient<D extends Definition> {
  private client?: RpcClient<D>;

  constructor(
    private readonly ctor: ClientCtor,
    readonly peer: string,
    private readonly secret: string,
    private readonly address?: string | ((peer: string) => string | undefined),
  ) {}

  get(): RpcClient<D> {
    if (this.client) return this.client;
    const given = typeof this.address === 'function' ? this.address(this.peer) : this.address;
    const address = given ?? process.env[`${this.peer.toUpperCase()}_ADDR`];
    if (!address) throw DomainError.unavailable(`the ${this.peer} service is not configured (${this.peer.toUpperCase()}_ADDR)`);
    this.client = new RpcClient<D>(this.ctor, address, { secret: this.secret, peer: this.peer });
    return this.client;
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
