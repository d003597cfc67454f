import { layout, toCsv } from '../src/index';

describe('box layout', () => {
  it('puts samples at their metadata.position and fills the rest row by row', () => {
    const s = (name: string, position?: string) => ({ name, metadata: position ? { position } : {} });
    const { grid, overflow } = layout([s('x'), s('b2', 'B2'), s('y'), s('bad', 'Z9'), s('z'), s('w')], 2, 2);
    expect(grid.map((r) => r.map((c) => c?.name))).toEqual([
      ['x', 'y'],
      ['bad', 'b2'],
    ]);
    expect(overflow.map((o) => o.name)).toEqual(['z', 'w']);
  });
});

describe('CSV', () => {
  it('quotes, keeps numbers and neutralises formulas in text', () => {
    const csv = toCsv([{ a: 'x,y', b: -2.5 }, { a: '=cmd()', c: { k: '"q"' } }]);
    expect(csv).toBe('a,b,c\r\n"x,y",-2.5,\r\n\'=cmd(),,"{""k"":""\\""q\\""""}"\r\n');
  });
});
