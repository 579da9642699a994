/**
 * The WebAssembly JavaScript API as Node provides it. TypeScript only declares it in lib.dom,
 * which would also bring browser globals that clash with Node's, so the part we use is declared
 * here.
 */
declare namespace WebAssembly {
  type ImportValue = unknown;
  type ModuleImports = Record<string, ImportValue>;
  type Imports = Record<string, ModuleImports>;
  type Exports = Record<string, unknown>;

  interface MemoryDescriptor {
    initial: number;
    maximum?: number;
    shared?: boolean;
  }

  class Module {
    constructor(bytes: BufferSource);
    static exports(module: Module): Array<{ name: string; kind: string }>;
    static imports(module: Module): Array<{ module: string; name: string; kind: string }>;
  }

  class Instance {
    constructor(module: Module, imports?: Imports);
    readonly exports: Exports;
  }

  class Memory {
    constructor(descriptor: MemoryDescriptor);
    readonly buffer: ArrayBuffer;
    grow(delta: number): number;
  }

  interface GlobalDescriptor {
    value: 'i32' | 'i64' | 'f32' | 'f64';
    mutable?: boolean;
  }

  class Global {
    constructor(descriptor: GlobalDescriptor, value?: unknown);
    value: unknown;
  }

  class CompileError extends Error {}
  class LinkError extends Error {}
  class RuntimeError extends Error {}

  interface WebAssemblyInstantiatedSource {
    module: Module;
    instance: Instance;
  }

  function compile(bytes: BufferSource): Promise<Module>;
  function validate(bytes: BufferSource): boolean;
  function instantiate(bytes: BufferSource, imports?: Imports): Promise<WebAssemblyInstantiatedSource>;
  function instantiate(module: Module, imports?: Imports): Promise<Instance>;
}

type BufferSource = ArrayBufferView | ArrayBuffer;
