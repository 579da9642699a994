// The directory holding the WIT packages, for tools that build or check components against them.
import { fileURLToPath } from 'node:url';

export const witDir = fileURLToPath(new URL('.', import.meta.url));
