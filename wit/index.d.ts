/** The directory holding the WIT packages. */
export declare const witDir: string;
