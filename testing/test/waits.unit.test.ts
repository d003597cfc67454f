import { waitFor } from '../src/waits';

describe('waitFor', () => {
  it('resolves with the first value that is not undefined, null or false', async () => {
    const seen = [undefined, null, false, 0, 'late'];
    let i = 0;
    // 0 is a value: only undefined, null and false mean "not yet"
    expect(await waitFor('a value', () => seen[i++], { intervalMs: 1 })).toBe(0);
    expect(i).toBe(4);
  });

  it('polls an async check until it holds', async () => {
    let n = 0;
    expect(await waitFor('three looks', async () => ++n >= 3, { intervalMs: 1 })).toBe(true);
    expect(n).toBe(3);
  });

  it('fails after the deadline naming what did not happen', async () => {
    const started = Date.now();
    await expect(waitFor('the row to appear', () => false, { timeoutMs: 60, intervalMs: 5 })).rejects.toThrow('the row to appear: did not happen within 60 ms');
    expect(Date.now() - started).toBeGreaterThanOrEqual(60);
  });

  it('takes the timeout alone as a number', async () => {
    await expect(waitFor('nothing', () => undefined, 30)).rejects.toThrow('nothing: did not happen within 30 ms');
  });

  it("fails at once with the check's own error, rather than polling it away", async () => {
    let n = 0;
    const failing = () => {
      n++;
      throw new Error('relation "x" does not exist');
    };
    await expect(waitFor('the row', failing, 5_000)).rejects.toThrow('relation "x" does not exist');
    expect(n).toBe(1);
  });
});
