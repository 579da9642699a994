// The capsule's component, in JavaScript. componentize-js turns this module into a
// WebAssembly component exporting `murmur:capsule/run@0.1.0` (see capsule.wit).
import { getEnvironment } from 'wasi:cli/environment@0.2.12';

export const run = {
  run() {
    const env = Object.fromEntries(getEnvironment());
    const name = env.MURMUR_CAPSULE_NAME ?? 'a capsule';
    console.log(`${env.GREETING ?? 'hello'} from ${name}, inside its sandbox`);
  },
};
