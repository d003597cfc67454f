import { connect, type ChannelModel } from 'amqplib';
import { corkMultiplexerPasses } from '../src/adapters/amqplib';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/** Guards the amqplib adapter (decision 055): fails when the multiplexer's internals are gone or changed. */
describeWithServers(['rabbitmq'], 'amqplib adapter: the multiplexer pass corked', () => {
  let model: ChannelModel;
  afterAll(() => model?.close());

  it('corks the socket once per pass, and the frames still arrive in order', async () => {
    model = await connect(process.env.AMQP_URL!);
    const mux = (model as unknown as { connection: { muxer: { out: { cork(): void } } } }).connection.muxer;
    corkMultiplexerPasses(model);
    let corks = 0;
    const cork = mux.out.cork.bind(mux.out);
    mux.out.cork = () => {
      corks++;
      cork();
    };
    const ch = await model.createChannel();
    const { queue } = await ch.assertQueue('', { exclusive: true });
    const got: string[] = [];
    await ch.consume(queue, (m) => m && got.push(m.content.toString()), { noAck: true });
    const sent = Array.from({ length: 50 }, (_, i) => String(i));
    for (const s of sent) ch.sendToQueue(queue, Buffer.from(s));
    await waitFor('50 messages back', () => got.length === sent.length);
    expect(got).toEqual(sent);
    expect(corks).toBeGreaterThan(0);
    // a pass moves many frames: fewer passes than messages
    expect(corks).toBeLessThan(sent.length);
  });

  it('throws when the internals are not there', () => {
    expect(() => corkMultiplexerPasses({} as unknown as ChannelModel)).toThrow(/amqplib adapter/);
    expect(() => corkMultiplexerPasses({ connection: { muxer: { out: {} } } } as unknown as ChannelModel)).toThrow(/amqplib adapter/);
  });
});
