// Type-aware linting (typescript-eslint strictTypeChecked) of the services' and
// libraries' TypeScript. Types come from each package's tsconfig.json (src) and
// test/tsconfig.json (tests), found by the project service; the other packages
// are seen through their built declarations, so `npm run lint` builds first.
// Import cycles are refused by libs/testing/test/import-cycles.unit.test.ts
// (dpdm, part of the unit tests), not here. Relaxed rules and why: docs/decisions/027-lint.md.
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['**/dist/**', '**/node_modules/**', 'libs/contracts/src/lab/**', 'libs/contracts/src/google/**'],
  },
  {
    files: ['services/*/{src,test}/**/*.ts', 'libs/*/{src,test}/**/*.ts'],
    extends: [eslint.configs.recommended, ...tseslint.configs.strictTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
  },
  prettier,
);
