import { AmqpBus, createLogger, newId, type BusMessage } from '@lab/kit';
import { uniqueExchange } from '../../testing/src/backing';

/**
 * The connection to RabbitMQ drops while a consumer's handler is still running:
 * settling the message on the dead channel must not end the process, and the
 * broker delivers the message again once the bus has reconnected.
 */
const amqpUrl = process.env.AMQP_URL;
const describeBroker = amqpUrl ? describe : describe.skip;

describeBroker('a connection dropped while a handler runs', () => {
  const log = createLogger('test', 'silent');
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => void unhandled.push(err);
  let bus: AmqpBus;

  beforeAll(() => {
    process.on('unhandledRejection', onUnhandled);
    process.on('uncaughtException', onUnhandled);
  });

  afterAll(async () => {
    process.removeListener('unhandledRejection', onUnhandled);
    process.removeListener('uncaughtException', onUnhandled);
    await bus?.close();
  });

  /** Destroys the bus's socket to the broker, as a network failure would (the library keeps it private). */
  function dropConnection(b: AmqpBus): void {
    const model = (b as unknown as { model: { _core: { _model: { connection: { stream: { destroy(err?: Error): void } } } } } }).model;
    // with an error, as a reset would: a plain destroy() emits only 'close', which the library does not watch
    model._core._model.connection.stream.destroy(new Error('connection reset (test)'));
  }

  async function until(cond: () => boolean, what: string): Promise<void> {
    for (let i = 0; i < 500; i++) {
      if (cond()) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`timed out waiting for ${what}`);
  }

  it.each([
    ['succeeded (ack)', false],
    ['failed (retry queue, then ack)', true],
  ])('a handler that %s on a dead channel: no crash, the message comes again', async (_name, fails) => {
    bus = await AmqpBus.connect(amqpUrl!, uniqueExchange(), log, { queueExpiresMs: 600_000 });
    const seen: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await bus.subscribe({
      queue: `drop-${newId().slice(0, 8)}`,
      bindings: ['thing.#'],
      handler: async (m: BusMessage) => {
        seen.push(m.id);
        if (seen.length === 1) {
          await gate;
          if (fails) throw new Error('handler failed');
        }
      },
    });
    const msg: BusMessage = { id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} };
    await bus.publish([msg]);
    await until(() => seen.length === 1, 'the first delivery');

    dropConnection(bus);
    await until(() => !bus.connected, 'the bus to notice the drop');
    release(); // the handler settles its message on the closed channel
    await until(() => seen.length >= 2, 'the redelivery after reconnecting');

    expect(seen.every((id) => id === msg.id)).toBe(true);
    expect(bus.connected).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    expect(unhandled).toEqual([]);
    await bus.close();
  });
});
