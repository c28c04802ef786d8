package org.pyd4j;

/** Versions baked into the helper jar, so Python can check it runs against what Maven built. */
public final class Version {
    private Version() {}

    /** The DL4J/ND4J version this jar was built against (from its manifest). */
    public static String dl4jVersion() {
        String v = Version.class.getPackage().getImplementationVersion();
        return v == null ? "unknown" : v;
    }
}
